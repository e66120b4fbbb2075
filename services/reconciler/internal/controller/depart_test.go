package controller

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
)

// A selector edit that drops every node resets them one soak at a time
// (maxInTrial 1), not all at once; the pace holds in a new reconciler that
// knows only what the nodes recorded.
func TestSelectorChangeResetsArePaced(t *testing.T) {
	testSelectorChangeResetsArePaced(t, false)
}

// One edit that changes the selector and the source together: no
// NodeConfig uses the config the nodes leave, and their resets are paced
// all the same, by the NodeConfig they were selected by.
func TestSelectorAndSourceChangedInOneEditResetsArePaced(t *testing.T) {
	testSelectorChangeResetsArePaced(t, true)
}

func testSelectorChangeResetsArePaced(t *testing.T, newSource bool) {
	f := newFixture(t)
	names := []string{"n1", "n2", "n3"}
	agents := map[string]*fakeAgent{}
	for _, n := range names {
		agents[n] = f.addNode(n, map[string]string{"pool": "a"})
	}
	f.addConfigMap("ns", "cfg", "10", map[string]string{"k": "maxPods: 1\n"})
	one := intstr.FromInt32(1)
	nc := &v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "pool-a"}, Spec: v1alpha1.NodeConfigSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}},
		Source:       &v1alpha1.Source{ConfigMap: &v1alpha1.ConfigMapSource{Namespace: "ns", Name: "cfg", Key: "k"}},
		SoakSeconds:  60,
		Rollout:      v1alpha1.Rollout{MaxInTrial: &one},
	}}
	f.setNodeConfig(nc)
	// Bring every node to last-known-good, one trial at a time.
	for round := 0; ; round++ {
		done := true
		for _, n := range names {
			if err := f.syncNode(n); err != nil {
				t.Fatal(err)
			}
			done = done && agents[n].records().GetLastKnownGood() != nil
		}
		if done {
			break
		}
		if round == 10 {
			t.Fatal("setup: the nodes never all reached last-known-good")
		}
		f.now = f.now.Add(61 * time.Second)
	}

	nc.Generation = 2
	nc.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "b"}}
	if newSource {
		f.addConfigMap("ns", "cfg2", "20", map[string]string{"k": "maxPods: 2\n"})
		nc.Spec.Source = &v1alpha1.Source{ConfigMap: &v1alpha1.ConfigMapSource{Namespace: "ns", Name: "cfg2", Key: "k"}}
	}
	f.setNodeConfig(nc)
	f.c.nodesChanged()
	resets := func() (out []string) {
		for _, n := range names {
			if agents[n].records().GetLastReset() != nil {
				out = append(out, n)
			}
		}
		return out
	}
	syncAll := func(c *Controller) {
		t.Helper()
		for _, n := range names {
			if _, err := c.syncNode(t.Context(), n); err != nil {
				t.Fatal(err)
			}
		}
	}
	syncAll(f.c)
	if got := resets(); len(got) != 1 {
		t.Fatalf("after the selector change, reset nodes %v; want exactly one (maxInTrial 1)", got)
	}
	first := resets()[0]
	if r := agents[first].records().GetLastReset(); r.GetSoakSeconds() != 60 || r.GetFrom().GetName() != "cfg" {
		t.Fatalf("reset record %v; want soak 60 from cfg", r)
	}
	info, _ := f.c.NodeInfo(names[(indexOf(names, first)+1)%3])
	if info.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_WAITING {
		t.Fatalf("a node behind the reset is %v; want WAITING", info.State)
	}

	// A new leader knows only the nodes' records: the pace holds.
	f.now = f.now.Add(30 * time.Second)
	fresh := New(f.c.o)
	t.Cleanup(func() { fresh.nodeQ.ShutDown(); fresh.ncQ.ShutDown() })
	syncAll(fresh)
	syncAll(fresh)
	if got := resets(); len(got) != 1 {
		t.Fatalf("a new reconciler during the first reset's soak reset %v; want still only %s", got, first)
	}

	f.now = f.now.Add(31 * time.Second)
	syncAll(fresh)
	syncAll(fresh)
	if got := resets(); len(got) != 2 {
		t.Fatalf("after the first reset's soak, reset nodes %v; want two", got)
	}
	f.now = f.now.Add(61 * time.Second)
	syncAll(fresh)
	syncAll(fresh)
	if got := resets(); len(got) != 3 {
		t.Fatalf("after the second reset's soak, reset nodes %v; want all three", got)
	}
	for _, n := range names {
		r := agents[n].records()
		if r.GetAssigned() != nil || r.GetActive() != nil || r.GetLastKnownGood() != nil {
			t.Fatalf("%s not on its local default: %v", n, r)
		}
	}
	// A reset done is done: more syncs do not reset again.
	before := proto.Clone(agents[first].records())
	syncAll(fresh)
	if !proto.Equal(before, agents[first].records()) {
		t.Fatalf("%s was reset again", first)
	}
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// Admission waits until every Node of the start was synced once; a Node
// deleted before its first sync does not hold it back for ever.
func TestEveryNodeSeenWaitsForTheNodesOfTheStartOnly(t *testing.T) {
	f := newFixture(t)
	for _, n := range []string{"n1", "n2", "n3"} {
		f.addNode(n, nil)
	}
	if err := f.syncNode("n1"); err != nil {
		t.Fatal(err)
	}
	if f.c.everyNodeSeen("n2") {
		t.Fatal("seen with n3 never synced")
	}
	if err := f.nodes.Delete(nodeMeta(metav1.ObjectMeta{Name: "n3"})); err != nil {
		t.Fatal(err)
	}
	f.addNode("n4", nil) // joined after the start: has no reset of ours to soak
	if !f.c.everyNodeSeen("n2") {
		t.Fatal("not seen: n1 synced, n2 syncing, n3 gone and n4 new")
	}
}
