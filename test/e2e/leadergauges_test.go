package e2e

import (
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"

	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/framework/sim"
)

// The series only the leader may export: what it sees of the rollouts and
// of its work queues.
var leadershipSeries = []string{
	"nodeconfig_rollout_nodes", "nodeconfig_rollout_halted", "nodeconfig_rollout_refused", "nodeconfig_rollout_held",
	"nodeconfig_reconciler_nodes", "nodeconfig_reconciler_queue_depth", "workqueue_depth",
}

// A leader that loses its Lease without dying (frozen longer than the
// lease, then thawed: a long GC pause, a stopped VM) stands again as a
// candidate, and from then on its /metrics says it does not lead and holds
// none of the rollout gauges: only the new leader's are left for alerts
// that take the maximum across replicas.
func TestLeaderThatLosesItsLeaseExportsNoRolloutGauges(t *testing.T) {
	metricsOf := map[string]string{}
	for _, id := range []string{"r0", "r1"} {
		addr, err := proc.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		metricsOf[id] = addr
	}
	e := newEnv(t, 1, "--metrics-addr", metricsOf["r0"])
	r1 := e.startReconciler("r1", "--metrics-addr", metricsOf["r1"])
	t.Cleanup(r1.Close)
	replicas := map[string]*sim.Reconciler{"r0": e.reconciler, "r1": r1}
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", nil)
	e.waitNode(e.nodes[0].Name, 30*time.Second, "active", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.Active) == cm.ResourceVersion
	})

	// Whichever replica won the Lease shows this NodeConfig's gauges.
	var old, next string
	err := proc.WaitFor(30*time.Second, func() (bool, error) {
		for id, addr := range metricsOf {
			page, err := scrape(addr)
			if err != nil {
				return false, err
			}
			if gaugeValue(page, "nodeconfig_reconciler_leader", nil) == 1 && gaugeValue(page, "nodeconfig_rollout_nodes", map[string]string{"nodeconfig": e.label, "state": "selected"}) == 1 {
				old = id
				return true, nil
			}
		}
		return false, fmt.Errorf("no replica leads with NodeConfig %s's gauges", e.label)
	})
	if err != nil {
		t.Fatal(err)
	}
	next = map[string]string{"r0": "r1", "r1": "r0"}[old]

	// Frozen past the lease (4 s), the old leader is replaced.
	pid := replicas[old].Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(thaw)
	err = proc.WaitFor(30*time.Second, func() (bool, error) {
		page, err := scrape(metricsOf[next])
		if err != nil {
			return false, err
		}
		return gaugeValue(page, "nodeconfig_reconciler_leader", nil) == 1 &&
			gaugeValue(page, "nodeconfig_rollout_nodes", map[string]string{"nodeconfig": e.label, "state": "selected"}) == 1, nil
	})
	if err != nil {
		t.Fatalf("%s did not take over while %s was frozen: %v", next, old, err)
	}
	thaw()

	// Thawed, it finds the Lease held by another and stops leading, but
	// keeps running.
	var left []string
	err = proc.WaitFor(30*time.Second, func() (bool, error) {
		page, err := scrape(metricsOf[old])
		if err != nil {
			return false, err
		}
		left = left[:0]
		for _, name := range leadershipSeries {
			if f := page[name]; f != nil && len(f.GetMetric()) > 0 {
				left = append(left, fmt.Sprintf("%s (%d series)", name, len(f.GetMetric())))
			}
		}
		return gaugeValue(page, "nodeconfig_reconciler_leader", nil) == 0 && len(left) == 0, nil
	})
	if err != nil {
		t.Fatalf("%s, which lost the Lease, still says it leads or exports %v: %v", old, left, err)
	}
	if !replicas[old].Running() {
		t.Fatalf("%s exited after losing the Lease; it should stand again as a candidate", old)
	}
	page, err := scrape(metricsOf[next])
	if err != nil {
		t.Fatal(err)
	}
	if v := gaugeValue(page, "nodeconfig_reconciler_leader", nil); v != 1 {
		t.Errorf("the new leader %s says nodeconfig_reconciler_leader %v, want 1", next, v)
	}
	if page["workqueue_adds_total"] == nil {
		t.Errorf("the new leader %s exports no work queue series", next)
	}
}

// scrape reads a /metrics page by family name.
func scrape(addr string) (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics on %s: %s", addr, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(resp.Body)
}

// gaugeValue is the value of the gauge series of name whose labels
// include labels; -1 when there is none.
func gaugeValue(page map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	f := page[name]
	if f == nil {
		return -1
	}
series:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue series
			}
		}
		return m.GetGauge().GetValue()
	}
	return -1
}
