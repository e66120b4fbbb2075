package consumer

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// fakeRuntime is a container runtime the test turns on and off.
type fakeRuntime struct {
	ready bool
	asked int
}

func (f *fakeRuntime) Ready(context.Context) (bool, string) {
	f.asked++
	if f.ready {
		return true, ""
	}
	return false, "dial unix /run/containerd/containerd.sock: connect: connection refused"
}

func waitingNode(since time.Time) *fakeNode {
	return &fakeNode{recs: &nodeconfigv1.Records{
		Active:        &nodeconfigv1.SourceRecord{Source: src("2")},
		LastKnownGood: &nodeconfigv1.SourceRecord{Source: src("1")},
		Consumer:      &nodeconfigv1.ConsumerRecord{Source: src("2"), Phase: nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING, Since: timestamppb.New(since)},
	}}
}

func heldForTheRuntime(t *testing.T, node *fakeNode) {
	t.Helper()
	if len(node.rollbacks) != 0 {
		t.Fatalf("rolled back the config while the container runtime is down: %q", node.rollbacks)
	}
	c := node.recs.GetConsumer()
	if c.GetPhase() != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING || !strings.HasPrefix(c.GetMessage(), "the container runtime is not ready: ") || !strings.Contains(c.GetMessage(), "connection refused") {
		t.Fatalf("consumer %v, want WAITING on the container runtime, in its words", c)
	}
}

func TestGateHoldsACrashLoopWhileTheContainerRuntimeIsDown(t *testing.T) {
	// The kubelet exits at start (getCgroupDriverFromCRI) while containerd
	// is down: new processes, none healthy.
	node := waitingNode(time.Now())
	g, _, _ := newTestGate(t, node)
	g.Restarter = &crashLooper{}
	rt := &fakeRuntime{}
	g.Runtime = rt
	failures := 0
	steps(g, 10, &failures)
	heldForTheRuntime(t, node)
	// containerd is back: the crash-loop count starts over.
	rt.ready = true
	steps(g, 1, &failures)
	steps(g, 2, &failures)
	if len(node.rollbacks) != 0 {
		t.Fatalf("rolled back on processes seen while the container runtime was down: %q", node.rollbacks)
	}
	steps(g, 1, &failures)
	if len(node.rollbacks) != 1 || !strings.Contains(node.rollbacks[0], "crash-looping") {
		t.Fatalf("rollbacks %q, want one for a crash loop with the runtime ready", node.rollbacks)
	}
}

func TestGateHoldsTheHealthTimeoutWhileTheContainerRuntimeIsDown(t *testing.T) {
	node := waitingNode(time.Now().Add(-2 * time.Hour))
	g, _, _ := newTestGate(t, node)
	rt := &fakeRuntime{}
	g.Runtime = rt
	failures := 0
	steps(g, 3, &failures)
	heldForTheRuntime(t, node)
	// containerd is back: the kubelet gets its full health timeout from now.
	rt.ready = true
	wantAFreshHealthTimeout(t, g, node, &failures, "the container runtime was ready again")
}

func TestGateHoldsTheSoakWhileTheContainerRuntimeIsDown(t *testing.T) {
	node := soakingNode()
	g, _, healthy := newTestGate(t, node)
	g.Restarter = &kubeletProcess{id: "100@1"}
	rt := &fakeRuntime{}
	g.Runtime = rt
	failures := 0
	steps(g, 4, &failures)
	heldForTheRuntime(t, node)
	if !records.SoakStart(node.recs).IsZero() {
		t.Fatalf("the soak runs on (from %s) while the container runtime is down", records.SoakStart(node.recs))
	}
	rt.ready = true
	healthy.Store(true)
	steps(g, 2, &failures)
	if phase(node) != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY || len(node.rollbacks) != 0 {
		t.Fatalf("consumer %v rollbacks %q, want HEALTHY and none", node.recs.GetConsumer(), node.rollbacks)
	}
}

func TestGateBlamesTheConfigWithTheContainerRuntimeReady(t *testing.T) {
	node := waitingNode(time.Now().Add(-2 * time.Hour))
	g, _, _ := newTestGate(t, node)
	rt := &fakeRuntime{ready: true}
	g.Runtime = rt
	failures := 0
	steps(g, 1, &failures)
	if len(node.rollbacks) != 1 || rt.asked != 1 {
		t.Fatalf("rollbacks %q, runtime asked %d times; want one rollback after asking it once", node.rollbacks, rt.asked)
	}
}

func TestGateBlamesAndWritesNothingWhenTheAgentStops(t *testing.T) {
	node := waitingNode(time.Now().Add(-2 * time.Hour))
	g, _, _ := newTestGate(t, node)
	g.Runtime = &fakeRuntime{}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	failures := 0
	g.step(ctx, &failures)
	if len(node.rollbacks) != 0 || node.recs.GetConsumer().GetMessage() != "" {
		t.Fatalf("consumer %v rollbacks %q with the agent stopping, want both untouched", node.recs.GetConsumer(), node.rollbacks)
	}
}
