package controller

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/rollout"
)

// A halt set by more rollbacks than rollout.KeptNodes survives a fail-over after
// the nodes that rolled back are gone (replaced, say): the status keeps
// at least maxFailures of their names.
func TestAHaltAboveKeptNodesSurvivesAFailOver(t *testing.T) {
	const failures = rollout.KeptNodes + 44
	f := newFixture(t)
	var names []string
	for i := range failures {
		name := fmt.Sprintf("r%03d", i)
		names = append(names, name)
		f.addNode(name, map[string]string{"pool": "a"}).lateError = true
	}
	f.addConfigMap("ns", "cfg", "10", map[string]string{"k": "maxPods: 1\n"})
	all := intstr.FromString("100%")
	maxFailures := int32(failures)
	f.setNodeConfig(poolA("nc", v1alpha1.Rollout{MaxInTrial: &all, MaxFailures: &maxFailures}))
	// A trial of every node admits each at its first sync: seen, admitted
	// and rolled back; the second round finds them rolled back.
	for range 2 {
		for _, n := range names {
			f.syncAll(n)
			f.events() // the fake recorder blocks once its buffer is full
		}
	}
	for _, n := range names {
		if got := f.state(n); got != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ROLLED_BACK {
			t.Fatalf("setup: %s is %v, want ROLLED_BACK", n, got)
		}
	}
	f.syncNodeConfig("nc")
	f.catchUp("nc")

	// The nodes are replaced by one new node; a new reconciler starts.
	for _, n := range names {
		if err := f.nodes.Delete(nodeMeta(metav1.ObjectMeta{Name: n})); err != nil {
			t.Fatal(err)
		}
	}
	a := f.addNode("new", map[string]string{"pool": "a"})
	fresh := New(f.c.o)
	t.Cleanup(func() { fresh.nodeQ.ShutDown(); fresh.ncQ.ShutDown() })
	if _, err := fresh.syncNode(t.Context(), "new"); err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, rb := range f.storedNodeConfig("nc").Status.RolledBackVersions {
		kept += len(rb.Nodes)
	}
	if got := a.records().GetAssigned(); got != nil {
		t.Fatalf("after a fail-over a new node was assigned %s, which %d nodes rolled back from (maxFailures %d; the status kept %d names)",
			records.Describe(got.GetSource()), failures, failures, kept)
	}
	info, _ := fresh.NodeInfo("new")
	if info.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_HALTED {
		t.Fatalf("the new node is %v; want HALTED", info.State)
	}
}
