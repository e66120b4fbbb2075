package controller

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeconfig.io/services/api/v1alpha1"
)

// status.observedGeneration moves to a generation only once every selected
// node was synced at it: a wait on observedGeneration followed by a Ready
// check must not read node states of the generation before.
func TestObservedGenerationWaitsForTheNodesOfThatGeneration(t *testing.T) {
	f := newFixture(t)
	f.addNode("n1", map[string]string{"pool": "a"})
	f.addNode("n2", map[string]string{"pool": "a"})
	f.addConfigMap("ns", "cfg", "10", map[string]string{"k": "maxPods: 1\n"})
	nc := &v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "pool-a", Generation: 1, Finalizers: []string{v1alpha1.Finalizer}}, Spec: v1alpha1.NodeConfigSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}},
		Source:       &v1alpha1.Source{ConfigMap: &v1alpha1.ConfigMapSource{Namespace: "ns", Name: "cfg", Key: "k"}},
		SoakSeconds:  60,
	}}
	f.setNodeConfig(nc)
	for _, n := range []string{"n1", "n2"} {
		if err := f.syncNode(n); err != nil {
			t.Fatal(err)
		}
	}
	f.syncNodeConfig("pool-a")
	if got := f.storedNodeConfig("pool-a").Status.ObservedGeneration; got != 1 {
		t.Fatalf("observedGeneration %d after both nodes synced at 1, want 1", got)
	}

	nc = f.storedNodeConfig("pool-a")
	nc.Generation = 2
	nc.Spec.SoakSeconds = 120
	f.setNodeConfig(nc)
	f.syncNodeConfig("pool-a")
	if got := f.storedNodeConfig("pool-a").Status.ObservedGeneration; got != 1 {
		t.Fatalf("observedGeneration %d before any node saw generation 2, want 1", got)
	}
	if err := f.syncNode("n1"); err != nil {
		t.Fatal(err)
	}
	f.syncNodeConfig("pool-a")
	if got := f.storedNodeConfig("pool-a").Status.ObservedGeneration; got != 1 {
		t.Fatalf("observedGeneration %d with one of two nodes synced at generation 2, want 1", got)
	}
	if err := f.syncNode("n2"); err != nil {
		t.Fatal(err)
	}
	f.syncNodeConfig("pool-a")
	got := f.storedNodeConfig("pool-a").Status
	if got.ObservedGeneration != 2 {
		t.Fatalf("observedGeneration %d with both nodes synced at generation 2, want 2", got.ObservedGeneration)
	}
	for _, c := range got.Conditions {
		if c.ObservedGeneration != 2 {
			t.Fatalf("condition %s observedGeneration %d, want 2", c.Type, c.ObservedGeneration)
		}
	}
}

// A new reconciler (a fail-over) that syncs a NodeConfig's status before
// its nodes keeps the stored status, counts and Ready, and does not tell
// of a rollout complete again once it has synced them.
func TestAFailOverKeepsTheStatusUntilTheNodesAreSynced(t *testing.T) {
	f, _ := rolledOut(t, poolA("nc", v1alpha1.Rollout{}))
	f.syncNodeConfig("nc")
	f.catchUp("nc")
	before := f.storedNodeConfig("nc").Status
	if !meta.IsStatusConditionTrue(before.Conditions, v1alpha1.ConditionReady) || before.Active != 3 {
		t.Fatalf("setup: status %+v, want Ready with 3 active", before)
	}
	f.events()

	fresh := New(f.c.o)
	t.Cleanup(func() { fresh.nodeQ.ShutDown(); fresh.ncQ.ShutDown() })
	if _, err := fresh.syncNodeConfig(t.Context(), "nc"); err != nil {
		t.Fatal(err)
	}
	f.catchUp("nc")
	got := f.storedNodeConfig("nc").Status
	if ready := meta.FindStatusCondition(got.Conditions, v1alpha1.ConditionReady); ready == nil || ready.Status != metav1.ConditionTrue || got.Active != 3 {
		t.Errorf("a new reconciler that synced no node wrote Ready %+v with active=%d selected=%d; want the stored Ready=True with 3 active",
			ready, got.Active, got.Selected)
	}
	for _, n := range poolANodes {
		if _, err := fresh.syncNode(t.Context(), n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := fresh.syncNodeConfig(t.Context(), "nc"); err != nil {
		t.Fatal(err)
	}
	f.catchUp("nc")
	if got := f.storedNodeConfig("nc").Status; !meta.IsStatusConditionTrue(got.Conditions, v1alpha1.ConditionReady) || got.Active != 3 {
		t.Fatalf("after the new reconciler synced the nodes, status %+v; want Ready with 3 active", got)
	}
	for _, e := range f.events() {
		if strings.HasPrefix(e, "Normal RolloutComplete") {
			t.Fatalf("a fail-over emitted %q again", e)
		}
	}
}

// The stored status stands only so long: a node whose syncs never end
// does not freeze it for ever.
func TestTheStatusHoldEnds(t *testing.T) {
	f, _ := rolledOut(t, poolA("nc", v1alpha1.Rollout{}))
	f.syncNodeConfig("nc")
	f.catchUp("nc")
	writes := f.statusWrites()
	fresh := New(f.c.o)
	t.Cleanup(func() { fresh.nodeQ.ShutDown(); fresh.ncQ.ShutDown() })
	if _, err := fresh.syncNodeConfig(t.Context(), "nc"); err != nil {
		t.Fatal(err)
	}
	if got := f.statusWrites(); got != writes {
		t.Fatalf("%d status writes by a new reconciler that synced no node; want none", got-writes)
	}
	f.now = f.now.Add(statusHold)
	if _, err := fresh.syncNodeConfig(t.Context(), "nc"); err != nil {
		t.Fatal(err)
	}
	if got := f.statusWrites(); got == writes {
		t.Fatalf("no status write %s after the first status sync with nodes still not synced; want the hold over", statusHold)
	}
}
