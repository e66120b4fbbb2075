package rollout

import (
	"strings"
	"testing"

	"nodeconfig.io/services/api/v1alpha1"
)

// The settings are parsed once per generation: the spec changes only with
// it.
func TestAPolicyIsParsedOncePerGeneration(t *testing.T) {
	b := newBook()
	nc := nodeConfig("nc", 1)
	first := b.Policy(nc)
	if first.SoakSeconds != v1alpha1.DefaultSoakSeconds || first.MaxFailures != 1 || first.MaxInTrial(10) != 1 {
		t.Fatalf("defaults: soak %d, maxFailures %d, maxInTrial %d; want %d, 1, 1", first.SoakSeconds, first.MaxFailures, first.MaxInTrial(10), v1alpha1.DefaultSoakSeconds)
	}
	if again := b.Policy(nc.DeepCopy()); again != first {
		t.Error("the same generation was parsed again")
	}
	next := nc.DeepCopy()
	next.Generation, next.Spec.SoakSeconds, next.Spec.Rollout.Paused = 2, 120, true
	if p := b.Policy(next); p == first || p.SoakSeconds != 120 || !p.Paused {
		t.Errorf("generation 2: soak %d paused %v, want 120 and paused", p.SoakSeconds, p.Paused)
	}
}

// A window that does not parse holds before a pause; a closed window says
// when the next opens.
func TestHeld(t *testing.T) {
	b := newBook()
	for _, tc := range []struct {
		name    string
		rollout v1alpha1.Rollout
		reason  string
	}{
		{"open", v1alpha1.Rollout{}, ""},
		{"paused", v1alpha1.Rollout{Paused: true}, v1alpha1.ReasonPaused},
		{"invalid window", v1alpha1.Rollout{Paused: true, Windows: []v1alpha1.Window{{Start: "25:00", End: "04:00"}}}, v1alpha1.ReasonInvalidWindow},
		{"closed", v1alpha1.Rollout{Windows: []v1alpha1.Window{{Start: "02:00", End: "04:00"}}}, v1alpha1.ReasonOutsideWindow},
	} {
		nc := nodeConfig(tc.name, 1)
		nc.Spec.Rollout = tc.rollout
		h := b.Held(nc)
		if h.Reason != tc.reason {
			t.Errorf("%s: held %q (%s), want %q", tc.name, h.Reason, h.Message, tc.reason)
		}
		if open := h.Next.IsZero(); open != (tc.reason != v1alpha1.ReasonOutsideWindow) {
			t.Errorf("%s: next window %v", tc.name, h.Next)
		}
	}
}

// A CEL gate that does not compile holds every trial, with the compiler's
// words; the gates that are fine reach the nodes as they are.
func TestHealthGatesReachTheNodesOrHoldTheRollout(t *testing.T) {
	b := newBook()
	bad := nodeConfig("bad-cel", 1)
	bad.Spec.Health = &v1alpha1.HealthGates{CEL: `node.status.conditions.exists(c,`}
	if h := b.Held(bad); h.Reason != v1alpha1.ReasonInvalidHealthGate || !strings.Contains(h.Message, "spec.health.cel does not compile") {
		t.Fatalf("held %q (%s); want %s with the compiler's words", h.Reason, h.Message, v1alpha1.ReasonInvalidHealthGate)
	}
	good := nodeConfig("gates", 1)
	good.Spec.Health = &v1alpha1.HealthGates{
		Conditions: []v1alpha1.NodeConditionGate{{Type: "KernelDeadlock", Status: "False"}},
		CEL:        `node.metadata.name != ""`,
		Prometheus: &v1alpha1.PrometheusGate{URL: "http://127.0.0.1:9090", Query: `up{node="$node"} == 0`},
	}
	p := b.Policy(good)
	if b.Held(good).Reason != "" || p.HealthErr != nil {
		t.Fatalf("held %+v, %v; want none", b.Held(good), p.HealthErr)
	}
	g := p.Health
	if len(g.GetConditions()) != 1 || g.GetConditions()[0].GetType() != "KernelDeadlock" || g.GetCel() != good.Spec.Health.CEL ||
		g.GetPrometheus().GetUrl() != "http://127.0.0.1:9090" || g.GetPrometheus().GetQuery() != `up{node="$node"} == 0` {
		t.Fatalf("gates for the nodes %v; want the spec's", g)
	}
}

// The NodeConfig's drain reaches the nodes as their drain policy: Always
// drains every change, Needed only those a changed field needs; none sent
// without one (the nodes' default bound).
func TestTheDrainReachesTheNodes(t *testing.T) {
	nc := nodeConfig("nc", 1)
	if p := ParsePolicy(nc); p.Drain != nil {
		t.Fatalf("no drain in the spec: %v", p.Drain)
	}
	nc.Spec.Rollout.Drain = &v1alpha1.Drain{When: v1alpha1.DrainAlways, TimeoutSeconds: 90}
	if p := ParsePolicy(nc); !p.Drain.GetAlways() || p.Drain.GetTimeoutSeconds() != 90 {
		t.Fatalf("drain Always within 90s: %v", p.Drain)
	}
	nc.Spec.Rollout.Drain.When = v1alpha1.DrainNeeded
	if p := ParsePolicy(nc); p.Drain.GetAlways() || p.Drain.GetTimeoutSeconds() != 90 {
		t.Fatalf("drain Needed within 90s: %v", p.Drain)
	}
}
