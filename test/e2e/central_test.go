package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeconfig.io/test/sim"
)

// With central validation (the reconciler's default), a payload that fails
// the NodeConfig's validator is assigned to no node: zero rollbacks, every
// node keeps its config and last-known-good, and the NodeConfig says why
// with its own reason and a Warning event. The fixed payload rolls out.
func TestCentralValidationRefusesBeforeAnyNode(t *testing.T) {
	e := newNodes(t, 2, func(int) sim.NodeOptions { return sim.NodeOptions{} })
	e.startReconciler("r0", "--node-validation-only=false")
	good := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(1), "validator": "yaml", "rollout": map[string]any{"maxInTrial": "100%"}})
	for _, n := range e.nodes {
		e.waitNode(n.Name, 30*time.Second, "promoted", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
			return rv(st.LastKnownGood) == good.ResourceVersion
		})
	}
	before := []string{e.records(0).String(), e.records(1).String()}

	bad := e.configMap("cfg", map[string]string{"config.yaml": "maxPods: [110\n"})
	e.waitNodeConfigCondition(e.label, "Degraded", metav1.ConditionTrue, "ConfigRefused", 20*time.Second)
	e.waitNodeConfigCondition(e.label, "Ready", metav1.ConditionFalse, "ConfigRefused", 20*time.Second)
	e.waitEvent("NodeConfig", e.label, "ConfigRefused", 10*time.Second)
	ev := e.events(t, "NodeConfig", e.label, "ConfigRefused")[0]
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, bad.ResourceVersion) || !strings.Contains(ev.Message, "invalid YAML") {
		t.Fatalf("event %s %q; want a Warning naming the version and the validator's words", ev.Type, ev.Message)
	}
	// The nodes' own records did not move: nothing assigned, nothing
	// rolled back.
	for i, n := range e.nodes {
		if after := e.records(i).String(); after != before[i] {
			t.Fatalf("node %s records changed for a refused version:\nbefore %s\nafter  %s", n.Name, before[i], after)
		}
		if got, _ := n.Target(); got != goodYAML {
			t.Fatalf("node %s target %q", n.Name, got)
		}
	}

	fixed := e.configMap("cfg", map[string]string{"config.yaml": "maxPods: 111\n"})
	for _, n := range e.nodes {
		e.waitNode(n.Name, 30*time.Second, "fixed version promoted", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
			return rv(st.LastKnownGood) == fixed.ResourceVersion
		})
	}
	e.waitNodeConfigCondition(e.label, "Ready", metav1.ConditionTrue, "AllNodesActive", 20*time.Second)
}
