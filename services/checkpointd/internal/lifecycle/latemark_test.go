package lifecycle

import (
	"testing"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// rolledBackByTheConsumer activates version rv over last-known-good "1"
// and has the consumer gate roll it back, as when the kubelet turns
// unhealthy on it: a payload that loads, so only the late mark keeps it out.
func rolledBackByTheConsumer(t *testing.T, f *fixture, rv string) {
	t.Helper()
	f.assign(t, "1", "a: 1\n")
	f.promote(t, "1")
	if got := f.assign(t, rv, "a: 2\n"); got != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED {
		t.Fatalf("outcome %v, want ACTIVATED", got)
	}
	if rolled, err := (ConsumerNode{f.node}).RollBack(src(rv), records.ReasonConsumerUnhealthy, "the kubelet turned unhealthy"); err != nil || !rolled {
		t.Fatalf("RollBack = %v, %v", rolled, err)
	}
}

// wantStillRolledBack checks that the node runs last-known-good and keeps
// the late error of version rv.
func wantStillRolledBack(t *testing.T, f *fixture, rv string) {
	t.Helper()
	recs := f.records(t)
	if !records.SameSource(recs.GetActive().GetSource(), src("1")) {
		t.Fatalf("active = %v, want last-known-good: version %s failed late and must never be active again", recs.GetActive().GetSource(), rv)
	}
	if e := recs.GetError().GetError(); e.GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE || e.GetReason() != records.ReasonConsumerUnhealthy {
		t.Fatalf("error = %v, want the late ConsumerUnhealthy error kept", e)
	}
	if got, _ := f.targetContent(t); got != "a: 1\n" {
		t.Fatalf("target = %q, want the last-known-good payload", got)
	}
}

func TestAnEarlyErrorDoesNotEraseALateOne(t *testing.T) {
	f := newFixture(t)
	rolledBackByTheConsumer(t, f, "2")
	// A NodeConfig key typo (or an RBAC blip) reaches the node as an early error.
	if _, err := f.node.SetError(&nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY, Reason: "DownloadFailed", Message: "no key"}); err != nil {
		t.Fatal(err)
	}
	wantStillRolledBack(t, f, "2")
	// The typo fixed: the same version is desired again and activated.
	if outcome, _, err := f.node.Activate(); err != nil || outcome != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ROLLED_BACK {
		t.Fatalf("Activate = %v, %v; want ROLLED_BACK with nothing activated", outcome, err)
	}
	wantStillRolledBack(t, f, "2")
}

func TestRecoverNeverActivatesAVersionThatFailedLate(t *testing.T) {
	f := newFixture(t)
	rolledBackByTheConsumer(t, f, "2")
	if _, err := f.node.SetError(nil); err != nil {
		t.Fatal(err)
	}
	if err := f.node.Recover(); err != nil {
		t.Fatal(err)
	}
	wantStillRolledBack(t, f, "2")
}

func TestASoakEditDoesNotBringBackAVersionThatFailedLate(t *testing.T) {
	f := newFixture(t)
	rolledBackByTheConsumer(t, f, "2")
	a := assignment("2", 600)
	if _, err := f.node.Assign(a); err != nil {
		t.Fatal(err)
	}
	if outcome, _, err := f.node.Activate(); err != nil || outcome != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ROLLED_BACK {
		t.Fatalf("Activate = %v, %v; want ROLLED_BACK with nothing activated", outcome, err)
	}
	wantStillRolledBack(t, f, "2")
	// Another validator is another judgement: it may try again.
	a.Validator = nodeconfigv1.Validator_VALIDATOR_NONE
	if _, err := f.node.Assign(a); err != nil {
		t.Fatal(err)
	}
	if outcome, _, err := f.node.Activate(); err != nil || outcome != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED {
		t.Fatalf("Activate with another validator = %v, %v; want ACTIVATED", outcome, err)
	}
}

func TestTheLateMarkOutlivesAResetAndANewVersion(t *testing.T) {
	f := newFixture(t)
	rolledBackByTheConsumer(t, f, "2")
	if got := f.assign(t, "3", "a: 3\n"); got != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED {
		t.Fatalf("outcome %v", got)
	}
	if _, err := f.node.Reset(0, ""); err != nil {
		t.Fatal(err)
	}
	f.assign(t, "1", "a: 1\n")
	f.promote(t, "1")
	if _, err := f.node.Assign(assignment("2", 60)); err != nil {
		t.Fatal(err)
	}
	if outcome, _, err := f.node.Activate(); err != nil || outcome != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ROLLED_BACK {
		t.Fatalf("Activate of the marked version = %v, %v; want ROLLED_BACK", outcome, err)
	}
	wantStillRolledBack(t, f, "2")
}
