package lifecycle

import (
	"os"
	"strings"
	"testing"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

type wakes struct{ n int }

func (w *wakes) Wake() { w.n++ }

// A new file the kubelet would run the same (keys reordered, comments, or
// saying again what the node's own files say) is written without a
// restart, and its soak begins at once; a real change restarts it.
func TestAFileTheKubeletRunsTheSameNeedsNoRestart(t *testing.T) {
	f := kubeletNode(t)
	f.node = New(Options{Store: f.store, Target: f.target, Consumer: &wakes{}, Kubelet: f.node.kubelet})
	healthyOn := func(rv string) {
		t.Helper()
		if ok, err := (ConsumerNode{f.node}).SetConsumer(src(rv), nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY, "ok"); err != nil || !ok {
			t.Fatalf("consumer healthy on %s: %v %v", rv, ok, err)
		}
	}
	consumer := func() *nodeconfigv1.ConsumerRecord { return f.records(t).GetConsumer() }

	f.assignKubelet(t, "1", kubeletHeader+"maxPods: 57\n")
	if c := consumer(); c.GetPhase() != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_RESTARTING {
		t.Fatalf("consumer %v after the first file; want RESTARTING", c)
	}
	healthyOn("1")
	f.promote(t, "1")

	for rv, same := range map[string]string{
		"2": "# the same, reformatted\nmaxPods: 57\nkind: KubeletConfiguration\napiVersion: kubelet.config.k8s.io/v1beta1\n",
		"3": kubeletHeader + "maxPods: 57\nevictionSoft: {memory.available: 1Gi}\n", // what the base config says already
	} {
		f.assignKubelet(t, rv, same)
		c := consumer()
		if c.GetPhase() != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY || !records.SameSource(c.GetSource(), src(rv)) || !strings.HasPrefix(c.GetMessage(), records.NoRestartNeeded) {
			t.Fatalf("version %s: consumer %v; want HEALTHY on it, no restart needed", rv, c)
		}
		if b, err := os.ReadFile(f.target.Path()); err != nil || string(b) != same {
			t.Fatalf("version %s: file %q (%v); want the new file written", rv, b, err)
		}
		if records.SoakStart(f.records(t)).IsZero() {
			t.Fatalf("version %s: the soak has not begun", rv)
		}
		f.promote(t, rv)
	}

	f.assignKubelet(t, "4", kubeletHeader+"maxPods: 58\n")
	if c := consumer(); c.GetPhase() != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_RESTARTING {
		t.Fatalf("consumer %v after a real change; want RESTARTING", c)
	}
}
