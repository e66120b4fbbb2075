package e2e

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/framework/sim"
)

// A consumer that is healthy on a new config at first and fails its probe
// during the soak: the node rolls the config back, never promotes it, and
// says why with the consumer's own words. A small HTTP server of the test
// stands in for the kubelet (the real one is test/realnode's).
func TestConsumerUnhealthyDuringTheSoakIsRolledBackNeverPromoted(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	standIn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if healthy.Load() {
			_, _ = w.Write([]byte("ok"))
			return
		}
		http.Error(w, "[-]syncloop failed: PLEG is not healthy", http.StatusInternalServerError)
	}))
	defer standIn.Close()
	e := newNodes(t, 1, func(int) sim.NodeOptions {
		return sim.NodeOptions{CheckpointdArgs: []string{
			// Not running (no pid file): a restart is a no-op, the probe is the stand-in.
			"--consumer-restart=signal", "--consumer-pid-file=" + filepath.Join(t.TempDir(), "absent.pid"),
			"--consumer-health-url=" + standIn.URL, "--consumer-probe-period=100ms", "--consumer-failure-threshold=3",
		}}
	})
	e.startReconciler("r0")
	node := e.nodes[0].Name
	cm := e.configMap("kubelet", map[string]string{"config.yaml": "maxPods: 57\n"})
	e.use("consumer", "kubelet", map[string]any{"soakSeconds": int64(60)})
	e.waitNode(node, 30*time.Second, "soaking on a healthy consumer", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.Active) == cm.ResourceVersion && reasonIs(c, "Soaking")
	})
	healthy.Store(false)
	e.waitNode(node, 30*time.Second, "rolled back for the unhealthy consumer", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return st.Active == nil && reasonIs(c, "ConsumerUnhealthy") && strings.Contains(c.Message, "PLEG is not healthy")
	})
	recs := e.records(0)
	if recs.GetLastKnownGood() != nil || recs.GetActive() != nil {
		t.Fatalf("records after the rollback: %v (want the local default active and no last-known-good)", recs)
	}
	if got := recs.GetError().GetError(); got.GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE || got.GetReason() != "ConsumerUnhealthy" {
		t.Fatalf("error record %v, want a late ConsumerUnhealthy", got)
	}
	// Healthy again, the same version is not retried: no promotion of it, ever.
	healthy.Store(true)
	if err := proc.WaitFor(30*time.Second, func() (bool, error) {
		recs := e.records(0)
		if recs.GetLastKnownGood() != nil {
			t.Fatalf("promoted after the rollback: %v", recs)
		}
		return recs.GetConsumer().GetPhase() == nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY && recs.GetActive() == nil, nil
	}); err != nil {
		t.Fatalf("the consumer is not recorded healthy on the local default: %v", e.records(0))
	}
	if _, c, err := e.status(node); err != nil || !reasonIs(c, "ConsumerUnhealthy") {
		t.Fatalf("condition %v (%v), want it still to say why the version was rolled back", c, err)
	}
}
