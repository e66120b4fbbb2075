package e2e

import (
	"fmt"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeconfig.io/services/api/v1alpha1"
)

// BenchmarkWritesPerNodePerConfigChange counts, in the API server's audit
// log, the writes nodeconfig makes for one ConfigMap edit to go from
// assigned to last-known-good on every node (soak 1 s). Lease renewals are
// counted apart: they are per replica, not per node.
func BenchmarkWritesPerNodePerConfigChange(b *testing.B) {
	// The NodeConfig's own writes (its status, its history) are one set per
	// change whatever the fleet's size, and the budget counts each node's
	// share of them: 8 nodes in one trial, as
	// TestConfigChangeCostsAtMostThreeWritesPerNode counts them.
	const nodes = 8
	e := newEnv(b, nodes)
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(1), "rollout": map[string]any{"maxInTrial": "100%"}})
	waitAll := func(rvWant string) {
		for _, n := range e.nodes {
			e.waitNode(n.Name, 60*time.Second, "promoted", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
				return rv(st.LastKnownGood) == rvWant && reasonIs(c, "Active")
			})
		}
	}
	waitAll(cm.ResourceVersion)
	// The first rollout's trailing status writes land before the count.
	w0 := e.writesSettled()
	start := time.Now()
	b.ResetTimer()
	for i := range b.N {
		// A change of a value: a comment alone is no new version.
		next := e.configMap("cfg", map[string]string{"config.yaml": fmt.Sprintf("maxPods: %d\nlogging:\n  verbosity: 2\n", 111+i)})
		waitAll(next.ResourceVersion)
	}
	b.StopTimer()
	w := e.writesSettled().Minus(w0)
	per := float64(nodes * b.N)
	b.ReportMetric(float64(w.Statusd)/per, "statusd-writes/node/change")
	b.ReportMetric(float64(w.Events)/per, "event-writes/node/change")
	b.ReportMetric(float64(w.NodeConfig)/per, "nodeconfig-writes/node/change")
	// Other: the NodeConfig's history (ControllerRevisions), also per change.
	b.ReportMetric(float64(w.Other)/per, "other-writes/node/change")
	b.ReportMetric(float64(w.Total())/per, "writes/node/change")
	b.ReportMetric(float64(w.Leases)/time.Since(start).Seconds(), "lease-writes/s")
}

// BenchmarkSteadyStateWritesPerNodePerHour: with every node on its
// last-known-good and nothing changing, on the installed path (TLS, per-node
// tokens), every periodic timer runs every second or two (steadyEnv: the
// reconcile, statusd's full sync, checkpointd's GC, the token renewal); none
// may write. Each iteration's window lasts until on every node each timer
// fired, the reconcile and statusd's sync ten times, and at least 10 s
// passed; the writes are counted once they settled, at both ends. The
// creates that store nothing (TokenRequests, TokenReviews) are reported
// apart, as a count in the window: their rate is the shortened renewal's,
// not the installed one's.
func BenchmarkSteadyStateWritesPerNodePerHour(b *testing.B) {
	const nodes = 3
	s := newSteadyEnv(b, nodes)
	s.waitEvent("NodeConfig", s.label, "RolloutComplete", 10*time.Second)
	w0 := s.writesSettled() // the rollout's trailing writes are in
	start := time.Now()
	b.ResetTimer()
	for range b.N {
		s.window(10)
	}
	b.StopTimer()
	w := s.writesSettled().Minus(w0)
	hours := time.Since(start).Hours()
	b.ReportMetric(float64(w.Total())/nodes/hours, "writes/node/hour")
	b.ReportMetric(float64(w.Total()), "writes-in-window")
	b.ReportMetric(float64(w.Unstored), "unstored-creates-in-window")
}

// BenchmarkAssignmentLatency: a ConfigMap edit until the Node's annotation
// shows the new version active, watched on the Node (no polling).
func BenchmarkAssignmentLatency(b *testing.B) {
	e := newEnv(b, 1)
	node := e.nodes[0].Name
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(3600)})
	e.waitNode(node, 60*time.Second, "active", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
		return rv(st.Active) == cm.ResourceVersion
	})
	w, err := e.c.Client.CoreV1().Nodes().Watch(e.ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + node})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	var lat, toActive []time.Duration
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		next := e.configMap("cfg", map[string]string{"config.yaml": fmt.Sprintf("maxPods: %d\nlogging:\n  verbosity: 2\n", 111+i)})
		for done := false; !done; {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					b.Fatal("watch closed")
				}
				n, isNode := ev.Object.(*corev1.Node)
				if !isNode {
					continue
				}
				if st, err := v1alpha1.DecodeNodeConfigStatus(n.Annotations[v1alpha1.NodeAnnotationConfigStatus]); err == nil && rv(st.Active) == next.ResourceVersion {
					done = true
				}
			case <-time.After(30 * time.Second):
				b.Fatalf("change %d not active after 30 s", i)
			}
		}
		lat = append(lat, time.Since(start))
		written := e.records(0).GetActive().GetWrittenAt().AsTime()
		toActive = append(toActive, written.Sub(start))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds())/1000, "p99-ms")
	// The part until checkpointd durably recorded the new active config.
	sort.Slice(toActive, func(i, j int) bool { return toActive[i] < toActive[j] })
	b.ReportMetric(float64(toActive[len(toActive)/2].Microseconds())/1000, "to-active-record-p50-ms")
	b.ReportMetric(float64(toActive[min(len(toActive)-1, len(toActive)*99/100)].Microseconds())/1000, "to-active-record-p99-ms")
}
