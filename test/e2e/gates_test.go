package e2e

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/test/audit"
	"nodeconfig.io/test/proc"
	"nodeconfig.io/test/sim"
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

// steadyWindow waits until every node was reconciled at least times more
// (its reconciler sync count) and stayed ACTIVE, and at least minWindow
// passed (for statusd's periodic sync, which has no count to wait on);
// it returns how long that took.
func (e *env) steadyWindow(times uint64, minWindow time.Duration) time.Duration {
	e.t.Helper()
	syncs := map[string]uint64{}
	for _, n := range e.nodes {
		syncs[n.Name] = e.nodeState(n.Name).GetSyncs()
	}
	start := time.Now()
	if err := proc.WaitFor(minWindow+60*time.Second, func() (bool, error) {
		for _, n := range e.nodes {
			st := e.nodeState(n.Name)
			if st.GetSyncs() < syncs[n.Name]+times || st.GetState() != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ACTIVE {
				return false, nil
			}
		}
		return time.Since(start) >= minWindow, nil
	}); err != nil {
		e.t.Fatalf("the nodes were not reconciled %d times, staying active, in the window: %v", times, err)
	}
	return time.Since(start)
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
		next := e.configMap("cfg", map[string]string{"config.yaml": fmt.Sprintf("%s# change %d\n", goodYAML, i)})
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

// With every node on its last-known-good and nothing changing, no periodic
// timer writes: statusd's full sync and the reconciler's periodic
// reconcile are shortened to 1 s, and the window lasts until every node was
// reconciled at least five more times (lease renewals, per replica, are
// left out).
func TestSteadyStateWritesNothing(t *testing.T) {
	const nodes = 3
	e := newNodes(t, nodes, func(int) sim.NodeOptions {
		return sim.NodeOptions{StatusdArgs: []string{"--sync-period", "1s"}}
	})
	e.startReconciler("r0")
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.nodeConfig(e.label, map[string]any{
		"source":      map[string]any{"configMap": map[string]any{"namespace": e.ns, "name": "cfg", "key": "config.yaml"}},
		"soakSeconds": int64(1),
		"rollout":     map[string]any{"maxInTrial": "100%"},
	}, map[string]string{"nodeconfig.io/reconcile-interval-in-seconds": "1"})
	for _, n := range e.nodes {
		e.waitNode(n.Name, 60*time.Second, "promoted", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
			return rv(st.LastKnownGood) == cm.ResourceVersion && reasonIs(c, "Active")
		})
	}
	e.waitNodeConfigCondition(e.label, "Ready", metav1.ConditionTrue, "AllNodesActive", 30*time.Second)
	before := e.writesSettled()
	start := time.Now()
	// Every node reconciled five more times, and at least five statusd periods.
	e.steadyWindow(5, 5*time.Second)
	w := e.writesSettled().Minus(before)
	t.Logf("steady state, %v window: %d writes (statusd %d, events %d, NodeConfig %d, other %d), %d lease renewals",
		time.Since(start).Round(time.Second), w.Total(), w.Statusd, w.Events, w.NodeConfig, w.Other, w.Leases)
	if w.Total() != 0 {
		t.Fatalf("%d API writes with nothing changing; want none", w.Total())
	}
}
