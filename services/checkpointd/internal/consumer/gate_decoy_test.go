package consumer

import (
	"syscall"
	"testing"
	"time"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// Processes called kubelet outside the kubelet's cgroup, as any pod can
// start, neither hold the kubelet's restart, nor are signalled, nor count
// as its processes: while the kubelet is down after its restart, more of
// them come and go than the crash-loop threshold, and nothing is rolled
// back; once it runs again and is healthy, its config is.
func TestDecoysCauseNoRollback(t *testing.T) {
	k := newKubeletOnHost(t)
	node := &fakeNode{recs: &nodeconfigv1.Records{
		Active:        &nodeconfigv1.SourceRecord{Source: src("2")},
		LastKnownGood: &nodeconfigv1.SourceRecord{Source: src("1")},
		Consumer:      &nodeconfigv1.ConsumerRecord{Source: src("2"), Phase: nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_RESTARTING},
	}}
	g, _, healthy := newTestGate(t, node)
	g.Restarter = k.signal
	kubelet := k.kubelet(t)
	decoys := k.decoys(t)
	failures := 0

	steps(g, 1, &failures)
	if c := node.recs.GetConsumer(); c.GetPhase() != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING {
		t.Fatalf("consumer %v after the restart; want WAITING", c)
	}
	// The signal is sent; its exit is reaped a moment later.
	kubelet.waitExit(t, 10*time.Second)
	if kubelet.alive() || kubelet.signalledBy() != syscall.SIGTERM {
		t.Fatalf("the kubelet: running %v, signal %v; want it stopped by SIGTERM", kubelet.alive(), kubelet.signalledBy())
	}
	allAlive(t, "decoy", decoys...)

	// Its babysitter has not started it again yet.
	for range 2 * g.CrashLoopThreshold {
		churn := k.decoys(t)
		steps(g, 1, &failures)
		for _, d := range churn {
			_ = d.cmd.Process.Kill()
			<-d.exited
		}
	}
	if len(node.rollbacks) != 0 || node.recs.GetConsumer().GetPhase() != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING {
		t.Fatalf("rollbacks %q, consumer %v; want none, WAITING for the kubelet", node.rollbacks, node.recs.GetConsumer())
	}

	kubelet = k.kubelet(t)
	healthy.Store(true)
	steps(g, 1, &failures)
	if len(node.rollbacks) != 0 || node.recs.GetConsumer().GetPhase() != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY {
		t.Fatalf("rollbacks %q, consumer %v; want none, HEALTHY", node.rollbacks, node.recs.GetConsumer())
	}
	if id, _ := k.signal.Instance(); g.healthy != id || id == "" {
		t.Fatalf("the gate watches process %q, want the kubelet's %q", g.healthy, id)
	}
	allAlive(t, "kubelet", kubelet)
	allAlive(t, "decoy", decoys...)
}
