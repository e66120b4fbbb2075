package controller

import (
	"strings"
	"testing"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/configcheck/fieldpolicy"
)

// A version that sets a field the policy refuses reaches no node, even with
// the validator's child process left out (--node-validation-only): the
// NodeConfig says ConfigRefused, naming the field and why.
func TestAFieldThePolicyRefusesReachesNoNode(t *testing.T) {
	f, k := kubeletFixture(t)
	f.c.o.NodeValidationOnly = true
	f.addConfigMap("ns", "cfg", "11", map[string]string{"k": "authorization:\n  mode: AlwaysAllow\n"})
	for _, n := range []string{"n1", "n2", "n3"} {
		if err := f.syncNode(n); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if w := f.agents.agents[n].writes(); len(w) != 0 {
			t.Fatalf("%s: a refused version reached the node: %v", n, w)
		}
	}
	if got := k.runs.Load(); got != 0 {
		t.Fatalf("the kubelet validator ran %d times for a version the policy refuses", got)
	}
	f.syncNodeConfig("nc")
	c := f.condition("nc", v1alpha1.ConditionDegraded)
	if c == nil || c.Reason != v1alpha1.ReasonConfigRefused || !strings.Contains(c.Message, "authorization") || !strings.Contains(c.Message, "AlwaysAllow grants any caller") {
		t.Fatalf("Degraded %+v, want %s naming the field and its reason", c, v1alpha1.ReasonConfigRefused)
	}

	// The operator allows it: the next version goes out.
	f.c.o.Rules.Policy.Allowed = []string{"authorization"}
	f.addConfigMap("ns", "cfg", "12", map[string]string{"k": "authorization:\n  mode: AlwaysAllow\n"})
	if err := f.syncNode("n1"); err != nil {
		t.Fatal(err)
	}
	if src := f.agents.agents["n1"].records().GetAssigned().GetSource(); src.GetResourceVersion() != "12" {
		t.Fatalf("assigned %v once the field is allowed, want resourceVersion 12", src)
	}
}

// validator: none passes nothing but the field policy: it needs the
// operator's opt-in.
func TestValidatorNoneNeedsTheOperatorsOptIn(t *testing.T) {
	f, _ := kubeletFixture(t)
	nc := f.storedNodeConfig("nc").DeepCopy()
	nc.Spec.Validator = "none"
	nc.Generation++
	f.setNodeConfig(nc)
	for _, n := range []string{"n1", "n2", "n3"} {
		if err := f.syncNode(n); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if w := f.agents.agents[n].writes(); len(w) != 0 {
			t.Fatalf("%s: an unvalidated version reached the node: %v", n, w)
		}
	}
	f.syncNodeConfig("nc")
	if c := f.condition("nc", v1alpha1.ConditionDegraded); c == nil || c.Reason != v1alpha1.ReasonConfigRefused || !strings.Contains(c.Message, fieldpolicy.ValidatorNoneFlag) {
		t.Fatalf("Degraded %+v, want %s naming --%s", c, v1alpha1.ReasonConfigRefused, fieldpolicy.ValidatorNoneFlag)
	}
	f.c.o.Rules.ValidatorNone = true
	f.addConfigMap("ns", "cfg", "13", map[string]string{"k": "maxPods: 57\n"})
	if err := f.syncNode("n1"); err != nil {
		t.Fatal(err)
	}
	if src := f.agents.agents["n1"].records().GetAssigned().GetSource(); src.GetResourceVersion() != "13" {
		t.Fatalf("assigned %v with the opt-in, want resourceVersion 13", src)
	}
}
