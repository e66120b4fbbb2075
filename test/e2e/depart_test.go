package e2e

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"nodeconfig.io/test/framework/proc"
)

// A selector edit that drops every node returns them to their local default
// at the NodeConfig's pace: with maxInTrial 1 and a 2 s soak, each node's
// reset, as the node itself recorded it, comes at least one soak after the
// previous one, also across a reconciler fail-over in the middle.
func TestSelectorChangeResetsArePacedAcrossAFailOver(t *testing.T) {
	const soak = 2 * time.Second
	e := newEnv(t, 3)
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	rollout := map[string]any{"maxInTrial": int64(1)}
	e.use(e.label, "cfg", map[string]any{"rollout": rollout})
	for _, n := range e.nodes {
		e.waitNode(n.Name, 30*time.Second, "promoted", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
			return rv(st.LastKnownGood) == cm.ResourceVersion && reasonIs(c, "Active")
		})
	}

	spec := map[string]any{
		"nodeSelector": map[string]any{"matchLabels": map[string]any{"e2e-selects": "nothing"}},
		"source":       map[string]any{"configMap": map[string]any{"namespace": e.ns, "name": "cfg", "key": "config.yaml"}},
		"soakSeconds":  int64(soak / time.Second),
		"rollout":      rollout,
	}
	if err := e.tryNodeConfig(e.label, spec); err != nil {
		t.Fatal(err)
	}
	resets := func() []time.Time {
		var at []time.Time
		for i := range e.nodes {
			if r := e.records(i).GetLastReset(); r != nil {
				at = append(at, r.GetAt().AsTime())
			}
		}
		slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
		return at
	}
	if err := proc.WaitFor(20*time.Second, func() (bool, error) { return len(resets()) >= 1, nil }); err != nil {
		t.Fatalf("no node was reset after the selector change: %v", err)
	}
	// A new leader knows only what the API and the nodes say.
	e.reconciler.Close()
	e.reconciler = nil
	e.startReconciler("r1")

	var at []time.Time
	if err := proc.WaitFor(60*time.Second, func() (bool, error) { at = resets(); return len(at) == len(e.nodes), nil }); err != nil {
		t.Fatalf("resets recorded at %v; want all %d nodes reset: %v", at, len(e.nodes), err)
	}
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < soak {
			t.Fatalf("resets at %v: two of them %v apart, less than the %v soak that maxInTrial 1 allows", at, gap, soak)
		}
	}
	for i, n := range e.nodes {
		r := e.records(i)
		if r.GetAssigned() != nil || r.GetActive() != nil || r.GetLastKnownGood() != nil {
			t.Fatalf("node %s not on its local default: %v", n.Name, r)
		}
		if err := n.WaitTargetGone(10 * time.Second); err != nil {
			t.Fatalf("node %s still has its drop-in: %v", n.Name, err)
		}
	}
}
