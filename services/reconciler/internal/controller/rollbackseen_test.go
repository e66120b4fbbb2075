package controller

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
)

// A node's own rollback reaches the reconciler through the status its
// agent writes on the Node: a change of the error there queues the node at
// once, not at its soak's end.
func TestANodesNewErrorQueuesItAtOnce(t *testing.T) {
	f := newFixture(t)
	nodes, _, _, _ := f.c.Handlers()
	node := func(status string) *metav1.PartialObjectMetadata {
		return nodeMeta(metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{v1alpha1.NodeAnnotationConfigStatus: status}})
	}
	soaking := node(`{"assigned":{"uid":"u","resourceVersion":"2"},"active":{"uid":"u","resourceVersion":"2"}}`)
	rolledBack := node(`{"assigned":{"uid":"u","resourceVersion":"2"},"active":{"uid":"u","resourceVersion":"1"},"error":"the consumer turned unhealthy"}`)
	nodes.OnUpdate(soaking, rolledBack)
	if got := drain(f.c.nodeQ); !slices.Equal(got, []string{"n1"}) {
		t.Fatalf("a rollback reported on the Node queued %v; want n1 at once", got)
	}
	// The same error again (another field moved): nothing new to judge.
	again := node(`{"assigned":{"uid":"u","resourceVersion":"2"},"active":{"uid":"u","resourceVersion":"1"},"lastKnownGood":{"uid":"u","resourceVersion":"1"},"error":"the consumer turned unhealthy"}`)
	nodes.OnUpdate(rolledBack, again)
	if got := drain(f.c.nodeQ); len(got) != 0 {
		t.Fatalf("an unchanged error queued %v; want nothing", got)
	}
}

// A rollback the node did by itself mid-soak, seen at the next sync, gets
// its Warning and is counted, as one the sync caused does; the halt it
// causes holds the next node back.
func TestARollbackSeenAfterTheFactIsEventedCountedAndHalts(t *testing.T) {
	f := newFixture(t)
	one := intstr.FromInt32(1)
	agents := map[string]*fakeAgent{}
	for _, n := range poolANodes {
		agents[n] = f.addNode(n, map[string]string{"pool": "a"})
	}
	f.addConfigMap("ns", "cfg", "10", map[string]string{"k": "maxPods: 1\n"})
	f.setNodeConfig(poolA("nc", v1alpha1.Rollout{MaxInTrial: &one}))
	f.syncAll(poolANodes...)
	var soaking string
	for _, n := range poolANodes {
		if f.state(n) == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING {
			soaking = n
		}
	}
	if soaking == "" {
		t.Fatal("setup: no node soaking")
	}
	f.events()
	before := testutil.ToFloat64(f.c.metrics.rollbacks)

	// The node's gate rolls back by itself, as checkpointd records it.
	a := agents[soaking]
	a.mu.Lock()
	a.recs.Active = a.recs.GetLastKnownGood()
	a.recs.Error = &nodeconfigv1.ErrorRecord{Error: &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE, Reason: records.ReasonConsumerUnhealthy, Message: "the consumer turned unhealthy"}, WrittenAt: a.ts()}
	a.mu.Unlock()
	if err := f.syncNode(soaking); err != nil {
		t.Fatal(err)
	}
	if got := f.state(soaking); got != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ROLLED_BACK {
		t.Fatalf("%s is %v; want ROLLED_BACK", soaking, got)
	}
	var warned bool
	for _, e := range f.events() {
		warned = warned || (strings.Contains(e, "Warning") && strings.Contains(e, "ConfigRolledBack") && strings.Contains(e, "the consumer turned unhealthy"))
	}
	if !warned {
		t.Fatal("no ConfigRolledBack Warning for the node's own rollback")
	}
	if got := testutil.ToFloat64(f.c.metrics.rollbacks) - before; got != 1 {
		t.Fatalf("rollbacks counted %v; want 1", got)
	}
	// Its agent out of reach for one sync (a DaemonSet update): the same
	// rollback is not told again.
	f.agents.mu.Lock()
	delete(f.agents.agents, soaking)
	f.agents.mu.Unlock()
	_ = f.syncNode(soaking)
	f.agents.mu.Lock()
	f.agents.agents[soaking] = a
	f.agents.mu.Unlock()
	if err := f.syncNode(soaking); err != nil {
		t.Fatal(err)
	}
	for _, e := range f.events() {
		if strings.Contains(e, "ConfigRolledBack") {
			t.Fatalf("the rollback was told again after an agent blip: %s", e)
		}
	}
	// maxFailures 1: the freed place goes to no one.
	f.syncAll(poolANodes...)
	for _, n := range poolANodes {
		if n != soaking && agents[n].records().GetAssigned() != nil {
			t.Fatalf("%s was admitted to a version that already failed: %v", n, agents[n].records().GetAssigned())
		}
	}
}
