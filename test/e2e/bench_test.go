package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"nodeconfig.io/test/audit"
)

// BenchmarkWritesPerNodePerConfigChange counts, in the API server's audit
// log, the writes nodeconfig makes for one ConfigMap edit to go from
// assigned to last-known-good on every node (soak 1 s). Lease renewals are
// counted apart: they are per replica, not per node.
func BenchmarkWritesPerNodePerConfigChange(b *testing.B) {
	const nodes = 3
	e := newEnv(b, nodes)
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(1)})
	waitAll := func(rvWant string) {
		for _, n := range e.nodes {
			e.waitNode(n.Name, 60*time.Second, "promoted", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
				return rv(st.LastKnownGood) == rvWant && reasonIs(c, "Active")
			})
		}
	}
	waitAll(cm.ResourceVersion)
	// Let trailing status writes of the first rollout land before counting.
	time.Sleep(2 * time.Second)
	logPath := filepath.Join(e.c.Dir, "audit.log")
	count := func() (statusd, events, nodeConfig, leases, other int) {
		_, err := audit.Count(logPath, func(ev audit.Event) bool {
			switch ev.Verb {
			case "create", "update", "patch", "delete":
			default:
				return false
			}
			if !strings.HasPrefix(ev.UserAgent, "nodeconfig-") {
				return false
			}
			switch {
			case strings.HasPrefix(ev.UserAgent, "nodeconfig-statusd"):
				statusd++
			case ev.ObjectRef.Resource == "events":
				events++
			case ev.ObjectRef.Resource == "nodeconfigs":
				nodeConfig++
			case ev.ObjectRef.Resource == "leases":
				leases++
			default:
				other++
			}
			return false
		})
		if err != nil {
			b.Fatal(err)
		}
		return
	}
	s0, e0, n0, l0, o0 := count()
	start := time.Now()
	b.ResetTimer()
	for i := range b.N {
		next := e.configMap("cfg", map[string]string{"config.yaml": goodYAML + "# change " + string(rune('a'+i%26)) + "\n"})
		waitAll(next.ResourceVersion)
	}
	b.StopTimer()
	time.Sleep(2 * time.Second)
	s1, e1, n1, l1, o1 := count()
	per := float64(nodes * b.N)
	b.ReportMetric(float64(s1-s0)/per, "statusd-writes/node/change")
	b.ReportMetric(float64(e1-e0)/per, "event-writes/node/change")
	b.ReportMetric(float64(n1-n0)/per, "nodeconfig-writes/node/change")
	b.ReportMetric(float64(o1-o0)/per, "other-writes/node/change")
	b.ReportMetric(float64((s1-s0)+(e1-e0)+(n1-n0)+(o1-o0))/per, "writes/node/change")
	b.ReportMetric(float64(l1-l0)/time.Since(start).Seconds(), "lease-writes/s")
}
