package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/configcheck/fieldpolicy"
	"nodeconfig.io/test/framework/grpcspy"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/framework/sim"
)

// A periodic reconcile on a jittered interval repairs drift of
// the materialized file, and says so with an event.
func TestPeriodicReconcileRepairsDrift(t *testing.T) {
	e := newEnv(t, 1)
	n := e.nodes[0]
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.nodeConfig(e.label, map[string]any{
		"source":      map[string]any{"configMap": map[string]any{"namespace": e.ns, "name": "cfg", "key": "config.yaml"}},
		"soakSeconds": int64(1),
	}, map[string]string{v1alpha1.AnnotationReconcileInterval: "1"})
	e.waitNode(n.Name, 20*time.Second, "promoted", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
		return rv(st.LastKnownGood) == cm.ResourceVersion
	})
	st := e.waitState(n.Name, 10*time.Second, nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ACTIVE)
	if st.GetNextReconcileTime() == nil {
		t.Fatal("no next reconcile time with a 1s interval")
	}
	if left := time.Until(st.GetNextReconcileTime().AsTime()); left > 1500*time.Millisecond {
		t.Fatalf("next reconcile in %v, beyond 1.5x the 1s interval", left)
	}
	path := filepath.Join(n.TargetDir, sim.TargetFile)
	if err := os.WriteFile(path, []byte("tampered: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := proc.WaitFor(15*time.Second, func() (bool, error) {
		got, _ := n.Target()
		return got == goodYAML, nil
	})
	if err != nil {
		t.Fatalf("drift not repaired: %v", err)
	}
	e.waitEvent("Node", n.Name, "DriftCorrected", 10*time.Second)
}

// An interval of 0 stops periodic reconciles once the node is up
// to date, but a spec change still reconciles. Seen from the node's agent:
// the reconciler's drift checks (RepairDrift, a call of every sync of an
// active node, and of no one else) come every second or so at interval 1,
// and stop at 0 for many times the longest gap seen before.
func TestReconcileIntervalZeroStopsPeriodicButSpecChangeReconciles(t *testing.T) {
	// The spec change below is to validator: none, which the operator
	// allows on both sides.
	e := newNodes(t, 1, func(int) sim.NodeOptions {
		return sim.NodeOptions{CheckpointdArgs: []string{"--" + fieldpolicy.ValidatorNoneFlag}}
	})
	n := e.nodes[0]
	spy := grpcspy.Start(t, "unix://"+n.Socket)
	e.startReconciler("r0", "--"+fieldpolicy.ValidatorNoneFlag, "--agent-address", n.Name+"="+spy.Target)
	driftChecks := func(after time.Time) []time.Time {
		var at []time.Time
		for _, c := range spy.Calls(nodeconfigv1.CheckpointService_RepairDrift_FullMethodName) {
			if c.At.After(after) {
				at = append(at, c.At)
			}
		}
		return at
	}
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	src := map[string]any{"configMap": map[string]any{"namespace": e.ns, "name": "cfg", "key": "config.yaml"}}
	e.nodeConfig(e.label, map[string]any{"source": src, "soakSeconds": int64(1)}, map[string]string{v1alpha1.AnnotationReconcileInterval: "1"})
	e.waitNode(n.Name, 20*time.Second, "promoted", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
		return rv(st.LastKnownGood) == cm.ResourceVersion
	})
	// The baseline: the longest gap among a few periodic reconciles.
	promoted := time.Now()
	const baseline = 5
	if err := proc.WaitFor(30*time.Second, func() (bool, error) {
		return len(driftChecks(promoted)) >= baseline, nil
	}); err != nil {
		t.Fatalf("at interval 1 the agent saw %d drift checks in 30 s, want %d: %v", len(driftChecks(promoted)), baseline, err)
	}
	checks := driftChecks(promoted)
	var longest time.Duration
	for i := 1; i < len(checks); i++ {
		longest = max(longest, checks[i].Sub(checks[i-1]))
	}

	zero := map[string]string{v1alpha1.AnnotationReconcileInterval: "0"}
	e.nodeConfig(e.label, map[string]any{"source": src, "soakSeconds": int64(1)}, zero)
	// The change itself syncs the node (and a periodic one already due
	// may still come); then none for five times the longest gap before.
	quiet := 5 * longest
	changed := time.Now()
	if err := proc.WaitFor(quiet+30*time.Second, func() (bool, error) {
		last := changed
		if c := driftChecks(changed); len(c) > 0 {
			last = c[len(c)-1]
		}
		return time.Since(last) >= quiet, nil
	}); err != nil {
		t.Fatalf("at interval 0 the agent saw %d drift checks in %v (at interval 1 the longest gap was %v): periodic reconciles go on",
			len(driftChecks(changed)), time.Since(changed).Round(time.Millisecond), longest)
	}
	t.Logf("at interval 1, %d drift checks at most %v apart; at 0, %d after the change, then none for %v", len(checks), longest, len(driftChecks(changed)), quiet)
	// The reconciler says the same.
	st := e.waitState(n.Name, 10*time.Second, nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ACTIVE)
	if st.GetNextReconcileTime() != nil {
		t.Fatalf("next reconcile at %v with interval 0; want none", st.GetNextReconcileTime().AsTime())
	}
	// A spec change (validator) is a new assignment and reconciles at once.
	e.nodeConfig(e.label, map[string]any{"source": src, "soakSeconds": int64(1), "validator": "none"}, zero)
	err := proc.WaitFor(20*time.Second, func() (bool, error) {
		return e.records(0).GetAssigned().GetValidator() == nodeconfigv1.Validator_VALIDATOR_NONE, nil
	})
	if err != nil {
		t.Fatalf("spec change not reconciled: %v", err)
	}
}

// The NodeConfig annotation nodeconfig.io/deletion-policy: abandon keeps
// nodes on their config when the NodeConfig is deleted; without it they
// are reset to their local defaults.
func TestDeletionPolicyAbandonKeepsConfigDefaultResets(t *testing.T) {
	e := newEnv(t, 2)
	kept, reset := e.nodes[0], e.nodes[1]
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	src := map[string]any{"configMap": map[string]any{"namespace": e.ns, "name": "cfg", "key": "config.yaml"}}
	e.nodeConfig("abandon-"+e.label, map[string]any{
		"source": src, "soakSeconds": int64(1),
		"nodeSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/hostname": kept.Name}},
	}, map[string]string{v1alpha1.AnnotationDeletionPolicy: "abandon"})
	e.nodeConfig("reset-"+e.label, map[string]any{
		"source": src, "soakSeconds": int64(1),
		"nodeSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/hostname": reset.Name}},
	}, nil)
	for _, n := range e.nodes {
		e.waitNode(n.Name, 20*time.Second, "promoted", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
			return rv(st.LastKnownGood) == cm.ResourceVersion
		})
	}
	e.deleteNodeConfigAndWait("abandon-" + e.label)
	e.deleteNodeConfigAndWait("reset-" + e.label)
	e.waitNode(reset.Name, 20*time.Second, "reset", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return st.Assigned == nil && st.LastKnownGood == nil && reasonIs(c, "LocalDefault")
	})
	// The abandoned node's reconciles after the deletion leave it alone.
	e.resyncAndWait(kept.Name, 10*time.Second, nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ACTIVE)
	st, _, err := e.status(kept.Name)
	if err != nil {
		t.Fatal(err)
	}
	if rv(st.Active) != cm.ResourceVersion || rv(st.LastKnownGood) != cm.ResourceVersion {
		t.Fatalf("abandoned node changed: %+v", st)
	}
	if got, _ := kept.Target(); got != goodYAML {
		t.Fatalf("abandoned node's target = %q", got)
	}
}

// Two NodeConfigs selecting one node: no change on the node, and both say
// SelectorConflict.
func TestSelectorConflictChangesNothing(t *testing.T) {
	e := newEnv(t, 1)
	n := e.nodes[0]
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", nil)
	e.waitNode(n.Name, 20*time.Second, "active", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
		return rv(st.Active) == cm.ResourceVersion
	})
	e.configMap("other", map[string]string{"config.yaml": "maxPods: 1\n"})
	e.use("second-"+e.label, "other", nil)
	e.waitState(n.Name, 20*time.Second, nodeconfigv1.LifecycleState_LIFECYCLE_STATE_CONFLICT)
	for _, name := range []string{e.label, "second-" + e.label} {
		e.waitNodeConfigCondition(name, "Degraded", "True", "SelectorConflict", 20*time.Second)
	}
	if got := e.records(0).GetAssigned().GetSource().GetResourceVersion(); got != cm.ResourceVersion {
		t.Fatalf("conflict changed the node: assigned resourceVersion %s, want %s", got, cm.ResourceVersion)
	}
}
