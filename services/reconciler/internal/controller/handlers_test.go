package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
)

// drain takes every key ready in q, sorted.
func drain(q interface {
	Len() int
	Get() (string, bool)
	Done(string)
}) []string {
	var keys []string
	for q.Len() > 0 {
		k, _ := q.Get()
		q.Done(k)
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// A Node update concerns the policy only when the labels or the abandon
// mark change; only a label change makes the kept selections stale.
func TestNodeUpdatesEnqueueOnlyWhatThePolicyReads(t *testing.T) {
	f := newFixture(t)
	nodes, _, _, _ := f.c.Handlers()
	node := func(labels, annotations map[string]string) *metav1.PartialObjectMetadata {
		return nodeMeta(metav1.ObjectMeta{Name: "n1", Labels: labels, Annotations: annotations})
	}
	base := node(map[string]string{"pool": "a"}, map[string]string{"nodeconfig.io/config-status": "{}"})
	for _, tc := range []struct {
		name      string
		cur       *metav1.PartialObjectMetadata
		enqueued  bool
		nodesMove bool
	}{
		{"status annotation", node(map[string]string{"pool": "a"}, map[string]string{"nodeconfig.io/config-status": `{"active":{}}`}), false, false},
		{"relabelled", node(map[string]string{"pool": "b"}, base.Annotations), true, true},
		{"abandon mark", node(base.Labels, map[string]string{v1alpha1.AnnotationAbandoned: "pool-a"}), true, false},
	} {
		version := f.c.nodesVersion.Load()
		nodes.OnUpdate(base, tc.cur)
		if got := drain(f.c.nodeQ); (len(got) == 1) != tc.enqueued {
			t.Errorf("%s: queued %v, want enqueued %v", tc.name, got, tc.enqueued)
		}
		if moved := f.c.nodesVersion.Load() != version; moved != tc.nodesMove {
			t.Errorf("%s: kept selections made stale %v, want %v", tc.name, moved, tc.nodesMove)
		}
	}
	nodes.OnDelete(cache.DeletedFinalStateUnknown{Key: "n1", Obj: base})
	if got := drain(f.c.nodeQ); !slices.Equal(got, []string{"n1"}) {
		t.Errorf("a deletion tombstone queued %v, want n1", got)
	}
}

// The reconciler's own status write wakes only the NodeConfig's waiting
// nodes; a spec change wakes every node it selected before or selects now.
func TestNodeConfigUpdatesWakeTheNodesTheyConcern(t *testing.T) {
	f := newFixture(t)
	for _, n := range []string{"n1", "n2", "n3"} {
		f.addNode(n, map[string]string{"pool": "a"})
	}
	f.setState("n1", "pool-a", nodeconfigv1.LifecycleState_LIFECYCLE_STATE_WAITING)
	f.setState("n2", "pool-a", nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING)
	_, _, ncs, _ := f.c.Handlers()
	old := poolA("pool-a", v1alpha1.Rollout{})
	old.Generation = 1

	withStatus := poolA("pool-a", v1alpha1.Rollout{})
	withStatus.Generation, withStatus.Status.Soaking = 1, 1
	ncs.OnUpdate(old, withStatus)
	if got := drain(f.c.nodeQ); !slices.Equal(got, []string{"n1"}) {
		t.Errorf("a status write woke %v, want only the waiting n1", got)
	}
	// The status is counted again after statusCoalesce, not at once:
	// during a rollout each write would otherwise bring the next.
	if got := drain(f.c.ncQ); len(got) != 0 {
		t.Errorf("a status write queued NodeConfigs %v at once, want none before %v", got, statusCoalesce)
	}
	_ = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, statusCoalesce+5*time.Second, true,
		func(context.Context) (bool, error) { return f.c.ncQ.Len() > 0, nil })
	if got := drain(f.c.ncQ); !slices.Equal(got, []string{"pool-a"}) {
		t.Errorf("a status write queued NodeConfigs %v after %v, want pool-a", got, statusCoalesce)
	}

	edited := poolA("pool-a", v1alpha1.Rollout{})
	edited.Generation, edited.Spec.SoakSeconds = 2, 120
	ncs.OnUpdate(old, edited)
	if got := drain(f.c.nodeQ); !slices.Equal(got, []string{"n1", "n2", "n3"}) {
		t.Errorf("a spec change woke %v, want every selected node", got)
	}
}
