package consumer

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// kubeletProcess is a restarter that tells the consumer's process: the test
// says which one runs ("" for none).
type kubeletProcess struct {
	countingRestarter
	id string
}

func (k *kubeletProcess) Instance() (string, error) { return k.id, nil }

// soakingNode is a node whose consumer has been healthy on the active
// config for a minute: its soak runs.
func soakingNode() *fakeNode {
	return &fakeNode{recs: &nodeconfigv1.Records{
		Assigned:      &nodeconfigv1.AssignedRecord{Source: src("2")},
		Active:        &nodeconfigv1.SourceRecord{Source: src("2"), WrittenAt: timestamppb.New(time.Now().Add(-time.Hour))},
		LastKnownGood: &nodeconfigv1.SourceRecord{Source: src("1")},
		Consumer:      &nodeconfigv1.ConsumerRecord{Source: src("2"), Phase: nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY, Since: timestamppb.New(time.Now().Add(-time.Minute))},
	}}
}

func TestGateDoesNotBlameTheConfigForAKubeletRestartedBySomethingElse(t *testing.T) {
	node := soakingNode()
	g, _, healthy := newTestGate(t, node)
	kubelet := &kubeletProcess{id: "100@1"}
	g.Restarter = kubelet
	healthy.Store(true)
	failures := 0
	steps(g, 1, &failures)
	soakBefore := records.SoakStart(node.recs)
	// kubeadm's babysitter starts a crashed kubelet again: a new process,
	// not healthy yet.
	kubelet.id = "200@2"
	healthy.Store(false)
	steps(g, 3, &failures)
	if len(node.rollbacks) != 0 {
		t.Fatalf("rolled back the config for a kubelet restarted by something else: %q", node.rollbacks)
	}
	if phase(node) != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING || !strings.Contains(node.recs.GetConsumer().GetMessage(), "restarted by something else") {
		t.Fatalf("consumer %v, want WAITING saying it was restarted by something else", node.recs.GetConsumer())
	}
	if !records.SoakStart(node.recs).IsZero() {
		t.Fatalf("the soak runs on (from %s) while the restarted kubelet is not healthy", records.SoakStart(node.recs))
	}
	healthy.Store(true)
	steps(g, 1, &failures)
	if phase(node) != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY || !records.SoakStart(node.recs).After(soakBefore) {
		t.Fatalf("consumer %v soak from %s, want HEALTHY and the soak measured from now", node.recs.GetConsumer(), records.SoakStart(node.recs))
	}
}

func TestGateDoesNotBlameTheConfigForAKubeletStoppedBySomethingElse(t *testing.T) {
	node := soakingNode()
	g, _, healthy := newTestGate(t, node)
	kubelet := &kubeletProcess{id: "100@1"}
	g.Restarter = kubelet
	healthy.Store(true)
	failures := 0
	steps(g, 1, &failures)
	// A package upgrade stops the kubelet, for longer than its health timeout.
	kubelet.id = ""
	healthy.Store(false)
	steps(g, 3, &failures)
	node.recs.Consumer.Since = timestamppb.New(time.Now().Add(-2 * time.Hour))
	steps(g, 3, &failures)
	if len(node.rollbacks) != 0 {
		t.Fatalf("rolled back the config for a kubelet stopped by something else: %q", node.rollbacks)
	}
	if phase(node) != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING || !strings.Contains(node.recs.GetConsumer().GetMessage(), "stopped by something else") {
		t.Fatalf("consumer %v, want WAITING saying it was stopped by something else", node.recs.GetConsumer())
	}
	// It runs again: its health timeout starts now.
	kubelet.id = "300@3"
	wantAFreshHealthTimeout(t, g, node, &failures, "the kubelet ran again")
}

// wantAFreshHealthTimeout checks that once what held the gate is over
// (after), the kubelet gets a whole health timeout from then, and that a
// kubelet that still never turns healthy is blamed on the config.
func wantAFreshHealthTimeout(t *testing.T, g *Gate, node *fakeNode, failures *int, after string) {
	t.Helper()
	steps(g, 3, failures)
	if len(node.rollbacks) != 0 {
		t.Fatalf("rolled back as soon as %s: %q", after, node.rollbacks)
	}
	if since := node.recs.GetConsumer().GetSince().AsTime(); time.Since(since) > time.Minute {
		t.Fatalf("the health timeout runs from %s, want from when %s", since, after)
	}
	node.recs.Consumer.Since = timestamppb.New(time.Now().Add(-2 * time.Hour))
	steps(g, 1, failures)
	if len(node.rollbacks) != 1 || !strings.Contains(node.rollbacks[0], "did not become healthy") {
		t.Fatalf("rollbacks %q, want one for the health timeout once %s", node.rollbacks, after)
	}
}

func TestGateCountsFailedProbesOfTheSameProcess(t *testing.T) {
	node := soakingNode()
	g, _, healthy := newTestGate(t, node)
	g.Restarter = &kubeletProcess{id: "100@1"}
	healthy.Store(true)
	failures := 0
	steps(g, 1, &failures)
	healthy.Store(false)
	steps(g, 1, &failures)
	if len(node.rollbacks) != 0 {
		t.Fatalf("rolled back after one failed probe of a threshold of two")
	}
	steps(g, 1, &failures)
	if len(node.rollbacks) != 1 || !strings.Contains(node.rollbacks[0], "turned unhealthy") {
		t.Fatalf("rollbacks %q, want one: the same process failed its probes", node.rollbacks)
	}
}

func TestGateCountsFailedProbesOfAProcessFirstSeenFailing(t *testing.T) {
	// The agent starts during the soak and its first probe fails: the process
	// that runs then is the one whose probes count.
	node := soakingNode()
	g, _, _ := newTestGate(t, node)
	g.Restarter = &kubeletProcess{id: "100@1"}
	failures := 0
	steps(g, 2, &failures)
	if len(node.rollbacks) != 1 || !strings.Contains(node.rollbacks[0], "turned unhealthy") {
		t.Fatalf("rollbacks %q, want one: the same process failed its probes", node.rollbacks)
	}
}

func TestGateBlamesACrashLoopAfterAnOutsideRestart(t *testing.T) {
	node := soakingNode()
	g, _, healthy := newTestGate(t, node)
	kubelet := &kubeletProcess{id: "100@1"}
	g.Restarter = kubelet
	healthy.Store(true)
	failures := 0
	steps(g, 1, &failures)
	healthy.Store(false)
	// Restarted by something else, then it exits again and again on its
	// config files.
	for _, id := range []string{"200@2", "300@3", "400@4"} {
		kubelet.id = id
		steps(g, 1, &failures)
	}
	if len(node.rollbacks) != 0 {
		t.Fatalf("rolled back after an outside restart and two processes of a crash-loop threshold of three: %q", node.rollbacks)
	}
	kubelet.id = "500@5"
	steps(g, 1, &failures)
	if len(node.rollbacks) != 1 || !strings.Contains(node.rollbacks[0], "crash-looping") {
		t.Fatalf("rollbacks %q, want one for a crash loop", node.rollbacks)
	}
}

func TestGateCountsFailedProbesWhenItNeverNamedTheProcess(t *testing.T) {
	// Healthy, yet the restarter finds no process (a --consumer-cgroup that
	// names none): it cannot tell a restart, so every failed probe counts.
	node := soakingNode()
	g, _, healthy := newTestGate(t, node)
	g.Restarter = &kubeletProcess{}
	healthy.Store(true)
	failures := 0
	steps(g, 1, &failures)
	healthy.Store(false)
	steps(g, 2, &failures)
	if len(node.rollbacks) != 1 || !strings.Contains(node.rollbacks[0], "turned unhealthy") {
		t.Fatalf("rollbacks %q, want one as without Instances", node.rollbacks)
	}
}
