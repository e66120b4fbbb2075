package e2e

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/test/framework/audit"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/framework/sim"
)

// The figures that do not depend on the machine's speed are gated here;
// the speed-dependent ones stay in make bench.

// writesSettled counts nodeconfig's API writes once they have stopped
// coming (none for audit.Settle): every write of what the test did is in.
func (e *env) writesSettled() audit.WriteCounts {
	e.t.Helper()
	w, err := audit.NewLog(filepath.Join(e.c.Dir, "audit.log")).Settled(audit.Settle, 60*time.Second)
	if err != nil {
		e.t.Fatalf("nodeconfig's writes never settled: %v", err)
	}
	return w
}

// A ConfigMap edit costs at most 3 API writes per node, from assignment to
// last-known-good (the design's budget: the node's status as it is
// activated and promoted, and the NodeConfig's share).
func TestConfigChangeCostsAtMostThreeWritesPerNode(t *testing.T) {
	const nodes, changes = 8, 2
	e := newEnv(t, nodes)
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(1), "rollout": map[string]any{"maxInTrial": "100%"}})
	waitAll := func(want string) {
		for _, n := range e.nodes {
			e.waitNode(n.Name, 60*time.Second, "promoted", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
				return rv(st.LastKnownGood) == want && reasonIs(c, "Active")
			})
		}
		e.waitNodeConfigCondition(e.label, "Ready", metav1.ConditionTrue, "AllNodesActive", 30*time.Second)
	}
	waitAll(cm.ResourceVersion)
	before := e.writesSettled()
	for i := range changes {
		// A change of a value: a comment alone is no new version.
		next := e.configMap("cfg", map[string]string{"config.yaml": fmt.Sprintf("maxPods: %d\nlogging:\n  verbosity: 2\n", 111+i)})
		waitAll(next.ResourceVersion)
	}
	w := e.writesSettled().Minus(before)
	per := float64(w.Total()) / float64(nodes*changes)
	t.Logf("%.2f writes per node per change (statusd %d, events %d, NodeConfig %d, other %d, for %d nodes x %d changes)",
		per, w.Statusd, w.Events, w.NodeConfig, w.Other, nodes, changes)
	if per > 3 {
		t.Fatalf("%.2f API writes per node per change; the budget is 3", per)
	}
}

// steadyEnv is a fleet at rest on the installed path (TLS, per-node
// tokens, TokenReview) with every periodic timer of nodeconfig shortened
// to seconds, each with something to tell that it fired:
//
//   - the reconciler's periodic reconcile (reconcile interval 1 s): each
//     node's sync count, from GetNode;
//   - statusd's full sync (--sync-period 1s): its
//     nodeconfig_statusd_patches_skipped_total, the syncs that sent nothing;
//   - checkpointd's GC (--gc-interval 1s): its
//     nodeconfig_checkpoint_sweeps_total;
//   - the reconciler's renewal of each node's token (--agent-token-lifetime
//     10m, the least the API server grants, and --agent-token-renew-after
//     2s, since no lifetime it accepts renews within a test): a TokenRequest
//     for the node's audience in the API server's audit log.
//
// Left out: lease renewals (per replica, not per node; counted apart), and
// the agents' review cache (a token is reviewed again after at most a
// minute): each renewed token is reviewed anyway, so the window sees
// TokenReviews.
type steadyEnv struct {
	*secureEnv
	checkpointdMetrics, statusdMetrics []string // each node's /metrics address
}

const steadyRenewAfter = 2 * time.Second

func newSteadyEnv(t testing.TB, nodes int) *steadyEnv {
	t.Helper()
	s := &steadyEnv{}
	for range nodes {
		ck, err := proc.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		st, err := proc.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		s.checkpointdMetrics, s.statusdMetrics = append(s.checkpointdMetrics, ck), append(s.statusdMetrics, st)
	}
	s.secureEnv = newSecureNodesWith(t, nodes, func(i int) sim.NodeOptions {
		return sim.NodeOptions{
			CheckpointdArgs: []string{"--gc-interval", "1s", "--metrics-addr", s.checkpointdMetrics[i]},
			StatusdArgs:     []string{"--sync-period", "1s", "--metrics-addr", s.statusdMetrics[i]},
		}
	})
	s.startReconciler("r0", append(s.reconcilerArgs(reconcilerSA),
		"--agent-token-lifetime", "10m", "--agent-token-renew-after", steadyRenewAfter.String())...)
	cm := s.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	s.nodeConfig(s.label, map[string]any{
		"source":      map[string]any{"configMap": map[string]any{"namespace": s.ns, "name": "cfg", "key": "config.yaml"}},
		"soakSeconds": int64(1),
		"rollout":     map[string]any{"maxInTrial": "100%"},
	}, map[string]string{v1alpha1.AnnotationReconcileInterval: "1"})
	for _, n := range s.nodes {
		s.waitNode(n.Name, 60*time.Second, "promoted", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
			return rv(st.LastKnownGood) == cm.ResourceVersion && reasonIs(c, "Active")
		})
	}
	s.waitNodeConfigCondition(s.label, "Ready", metav1.ConditionTrue, "AllNodesActive", 30*time.Second)
	return s
}

// metric reads one unlabelled series from a /metrics page.
func metric(addr, name string) (float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("no %s on %s", name, addr)
}

// counters are the timers' counts of every node at one moment.
type counters struct{ syncs, statusdSyncs, sweeps []float64 }

func (s *steadyEnv) counters() (counters, error) {
	var c counters
	for i, n := range s.nodes {
		st := s.nodeState(n.Name)
		if st.GetState() != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ACTIVE {
			return c, fmt.Errorf("node %s is %v, not active", n.Name, st.GetState())
		}
		skipped, err := metric(s.statusdMetrics[i], "nodeconfig_statusd_patches_skipped_total")
		if err != nil {
			return c, err
		}
		sweeps, err := metric(s.checkpointdMetrics[i], "nodeconfig_checkpoint_sweeps_total")
		if err != nil {
			return c, err
		}
		c.syncs, c.statusdSyncs, c.sweeps = append(c.syncs, float64(st.GetSyncs())), append(c.statusdSyncs, skipped), append(c.sweeps, sweeps)
	}
	return c, nil
}

// tokenRequests are the TokenRequests received in [from, to], by audience.
func (s *steadyEnv) tokenRequests(from, to time.Time) map[string][]audit.TokenRequest {
	s.t.Helper()
	all, err := audit.TokenRequests(filepath.Join(s.c.Dir, "audit.log"))
	if err != nil {
		s.t.Fatal(err)
	}
	out := map[string][]audit.TokenRequest{}
	for _, tr := range all {
		if tr.At.Before(from) || tr.At.After(to) {
			continue
		}
		for _, a := range tr.Audiences {
			out[a] = append(out[a], tr)
		}
	}
	return out
}

// window waits until, on every node, the reconciler reconciled it and
// statusd synced at least times more, checkpointd swept at least once, and
// the reconciler requested a new token for it, and every node is active,
// and at least times seconds passed (statusd's period: its sync count
// alone could come from other wake-ups). It returns when it began and
// ended.
func (s *steadyEnv) window(times int) (start, end time.Time) {
	s.t.Helper()
	before, err := s.counters()
	if err != nil {
		s.t.Fatal(err)
	}
	start = time.Now()
	var waiting string
	if err := proc.WaitFor(time.Duration(times)*time.Second+60*time.Second, func() (bool, error) {
		now, err := s.counters()
		if err != nil {
			return false, err
		}
		renewed := s.tokenRequests(start, time.Now())
		for i, n := range s.nodes {
			switch {
			case now.syncs[i] < before.syncs[i]+float64(times):
				waiting = fmt.Sprintf("node %s: %v reconciles in the window", n.Name, now.syncs[i]-before.syncs[i])
			case now.statusdSyncs[i] < before.statusdSyncs[i]+float64(times):
				waiting = fmt.Sprintf("node %s: %v statusd syncs in the window", n.Name, now.statusdSyncs[i]-before.statusdSyncs[i])
			case now.sweeps[i] < before.sweeps[i]+1:
				waiting = fmt.Sprintf("node %s: no checkpointd sweep in the window", n.Name)
			case len(renewed[audienceOf(n.Name)]) == 0:
				waiting = fmt.Sprintf("node %s: no TokenRequest for %s in the window", n.Name, audienceOf(n.Name))
			default:
				continue
			}
			return false, nil
		}
		waiting = "the minimum window"
		return time.Since(start) >= time.Duration(times)*time.Second, nil
	}); err != nil {
		s.t.Fatalf("the window never saw every timer fire (waiting on %s): %v", waiting, err)
	}
	return start, time.Now()
}

// With every node on its last-known-good and nothing changing, none of
// nodeconfig's periodic timers writes: the window (steadyEnv) lasts until
// on every node the reconciler and statusd have run at least five times,
// checkpointd's GC has swept and the reconciler has renewed the node's
// token, and the API writes in it, counted once they settled at both ends,
// must be none.
//
// A TokenRequest (and the agents' TokenReview of each new token) is a
// create in the audit log, but not a write here: the API server signs a
// token (or reviews one) and stores nothing, so no object, no etcd write,
// no watch event; audit.WriteCounts counts them apart (Unstored), and this
// test reports them. What keeps that figure honest is checked instead:
// every renewal was granted, and there was at most one per node per
// renewal period (none per call). At the default, 1 h asked and renewed at
// 80 %, that is 1.25 TokenRequests per node per hour.
func TestSteadyStateWritesNothing(t *testing.T) {
	const nodes, times = 3, 5
	s := newSteadyEnv(t, nodes)
	before := s.writesSettled()
	start, end := s.window(times)
	w := s.writesSettled().Minus(before)
	renewed := s.tokenRequests(start, end)
	t.Logf("steady state, %v window: %d writes (statusd %d, events %d, NodeConfig %d, other %d), %d lease renewals; "+
		"%d creates that store nothing (TokenRequests, TokenReviews)",
		end.Sub(start).Round(100*time.Millisecond), w.Total(), w.Statusd, w.Events, w.NodeConfig, w.Other, w.Leases, w.Unstored)
	if w.Total() != 0 {
		t.Errorf("%d API writes with nothing changing; want none", w.Total())
	}
	most := int(end.Sub(start)/steadyRenewAfter) + 1
	for _, n := range s.nodes {
		trs := renewed[audienceOf(n.Name)]
		for _, tr := range trs {
			if tr.Code != http.StatusCreated || tr.Account != "nodeconfig-system/"+reconcilerSA {
				t.Errorf("node %s: TokenRequest %+v, want one granted (201) for %s", n.Name, tr, reconcilerSA)
			}
		}
		t.Logf("node %s: %d TokenRequests in the window", n.Name, len(trs))
		if len(trs) > most {
			t.Errorf("node %s: %d TokenRequests in a %v window renewing every %v; want at most %d", n.Name, len(trs), end.Sub(start), steadyRenewAfter, most)
		}
	}
}
