package e2e

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

const goodYAML = "maxPods: 110\nlogging:\n  verbosity: 2\n"

// "The Assigned config becomes the LastKnownGood config when the node
// determines that the Assigned config is stable and correct ... If the
// Assigned config is Active at the end of this period, it becomes the
// LastKnownGood."
func TestAssignedBecomesLastKnownGoodAfterSoak(t *testing.T) {
	e := newEnv(t, 2)
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.nodeConfig(e.label, map[string]any{
		"source":      map[string]any{"configMap": map[string]any{"namespace": e.ns, "name": "cfg", "key": "config.yaml"}},
		"soakSeconds": 3,
		// Both nodes on trial together (the default is 10 %: one at a time).
		"rollout": map[string]any{"maxInTrial": "100%"},
	}, nil)
	for _, n := range e.nodes {
		e.waitNode(n.Name, 20*time.Second, "soaking", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
			return rv(st.Assigned) == cm.ResourceVersion && rv(st.Active) == cm.ResourceVersion && st.LastKnownGood == nil && reasonIs(c, "Soaking")
		})
		if got, ok := n.Target(); !ok || got != goodYAML {
			t.Fatalf("node %s target = %q (exists %v), want the assigned payload", n.Name, got, ok)
		}
	}
	for _, n := range e.nodes {
		e.waitNode(n.Name, 20*time.Second, "promoted", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
			return rv(st.LastKnownGood) == cm.ResourceVersion && reasonIs(c, "Active") && c.Status == corev1.ConditionTrue && st.Error == ""
		})
	}
	// One event for the whole rollout; per-node Normal events are opt-in.
	e.waitEvent("NodeConfig", e.label, "RolloutComplete", 10*time.Second)
	if got := e.events(t, "NodeConfig", e.label, "RolloutComplete"); len(got) != 1 || got[0].Count != 1 {
		t.Fatalf("RolloutComplete events: %+v, want one", got)
	}
	for _, n := range e.nodes {
		for _, reason := range []string{"ConfigActivated", "ConfigPromoted"} {
			if got := e.events(t, "Node", n.Name, reason); len(got) != 0 {
				t.Fatalf("node %s has %d %s events; the default --node-events=warnings records none", n.Name, len(got), reason)
			}
		}
	}
}
