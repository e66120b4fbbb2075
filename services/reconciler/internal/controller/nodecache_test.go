package controller

import (
	"slices"
	"testing"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// The node cache hands out copies, by name, with each node's sync counts;
// a node is in it only once a sync recorded it.
func TestNodeInfosAreSortedCopiesWithTheirSyncCounts(t *testing.T) {
	f := newFixture(t)
	active := nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ACTIVE
	f.c.mu.Lock()
	for _, name := range []string{"n3", "n1", "n2"} {
		f.c.infoLocked(name).State = active
	}
	if f.c.infoLocked("n1") != f.c.nodes["n1"] || len(f.c.nodes) != 3 {
		t.Error("infoLocked made a second entry for a known node")
	}
	f.c.mu.Unlock()
	f.c.syncBegan("n2")(nil) // begun and ended
	f.c.syncBegan("n2")      // under way
	f.c.syncBegan("n4")      // begun, never recorded

	infos := f.c.NodeInfos()
	var names []string
	for _, info := range infos {
		names = append(names, info.Name)
	}
	if !slices.Equal(names, []string{"n1", "n2", "n3"}) {
		t.Fatalf("NodeInfos names %v, want n1 n2 n3 (by name, only the recorded ones)", names)
	}
	if n2 := infos[1]; n2.Syncs != 1 || n2.SyncsStarted != 2 {
		t.Errorf("n2 syncs %d ended of %d started, want 1 of 2", n2.Syncs, n2.SyncsStarted)
	}

	infos[0].State = nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING
	if got, ok := f.c.NodeInfo("n1"); !ok || got.State != active {
		t.Errorf("NodeInfo(n1) = %v %v after a caller changed its copy, want the cached %v", got.State, ok, active)
	}
	if _, ok := f.c.NodeInfo("n4"); ok {
		t.Error("a node whose sync never recorded it is in the cache")
	}
}
