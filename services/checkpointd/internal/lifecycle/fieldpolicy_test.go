package lifecycle

import (
	"strings"
	"testing"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/configcheck/fieldpolicy"
)

// What the node's field policy refuses is never written, whoever assigned
// it: a reconciler that let it through (compromised, or with a policy of
// its own) cannot lift the node's.
func TestTheNodesFieldPolicyRefusesWhatTheReconcilerSent(t *testing.T) {
	f := kubeletNode(t)
	f.node.rules = &fieldpolicy.Rules{}
	good := kubeletHeader + "maxPods: 57\n"
	if got := f.assignKubelet(t, "1", good); got != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED {
		t.Fatalf("v1: %v", got)
	}
	f.promote(t, "1")
	open := kubeletHeader + "readOnlyPort: 10255\n"
	if got := f.assignKubelet(t, "2", open); got != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ROLLED_BACK {
		t.Fatalf("a refused field: %v, want a rollback", got)
	}
	e := f.records(t).GetError().GetError()
	if e.GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE || e.GetReason() != records.ReasonRefusedByPolicy || !strings.Contains(e.GetMessage(), "readOnlyPort") {
		t.Fatalf("error %v %s %q; want a late %s naming readOnlyPort", e.GetPhase(), e.GetReason(), e.GetMessage(), records.ReasonRefusedByPolicy)
	}
	if got, _ := f.targetContent(t); got != good {
		t.Fatalf("target %q; want last-known-good untouched", got)
	}
	// validator: none needs the node's own opt-in too.
	f.put(t, "3", kubeletHeader+"maxPods: 58\n")
	if _, err := f.node.Assign(Assignment{Source: src("3"), SoakSeconds: 60, Validator: nodeconfigv1.Validator_VALIDATOR_NONE}); err != nil {
		t.Fatal(err)
	}
	if got, _, err := f.node.Activate(); err != nil || got != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ROLLED_BACK {
		t.Fatalf("validator none without the opt-in: %v %v, want a rollback", got, err)
	}
	if msg := f.records(t).GetError().GetError().GetMessage(); !strings.Contains(msg, fieldpolicy.ValidatorNoneFlag) {
		t.Fatalf("error %q; want it to name --%s", msg, fieldpolicy.ValidatorNoneFlag)
	}
	f.node.rules.ValidatorNone = true
	f.put(t, "4", kubeletHeader+"maxPods: 59\n")
	if _, err := f.node.Assign(Assignment{Source: src("4"), SoakSeconds: 60, Validator: nodeconfigv1.Validator_VALIDATOR_NONE}); err != nil {
		t.Fatal(err)
	}
	if got, _, err := f.node.Activate(); err != nil || got != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED {
		t.Fatalf("validator none with the opt-in: %v %v, want activated", got, err)
	}
}
