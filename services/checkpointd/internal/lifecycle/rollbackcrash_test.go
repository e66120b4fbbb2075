package lifecycle

import (
	"testing"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// crash stands for the agent killed at a hook: the panic ends the call
// there, with what it wrote so far on disk.
type crash struct{}

// A kill between the rollback's file write and its records must not let
// the next start bring the failed version back.
func TestAKillInsideARollbackNeverBringsTheFailedVersionBack(t *testing.T) {
	f := newFixture(t)
	f.assign(t, "1", "a: 1\n")
	f.promote(t, "1")
	if got := f.assign(t, "2", "a: 2\n"); got != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED {
		t.Fatalf("outcome %v", got)
	}
	f.node.testHookInRollBack = func() { panic(crash{}) }
	func() {
		defer func() {
			if r := recover(); r != (crash{}) {
				panic(r)
			}
		}()
		_, _ = (ConsumerNode{f.node}).RollBack(src("2"), records.ReasonConsumerUnhealthy, "the kubelet turned unhealthy")
		t.Fatal("the hook did not run")
	}()
	// The agent starts again over the same store and file.
	f.node = New(Options{Store: f.store, Target: f.target})
	if err := f.node.Recover(); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.targetContent(t); got != "a: 1\n" {
		t.Fatalf("after the restart the file holds %q; want last-known-good", got)
	}
	recs := f.records(t)
	if !records.SameSource(recs.GetActive().GetSource(), src("1")) || recs.GetError().GetError().GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE {
		t.Fatalf("records %v; want last-known-good active and the late error", recs)
	}
}

// The same inside an activation's rollback, with a version soaking: the
// node ends on last-known-good, as the rollback would have left it, not on
// the version that soaked.
func TestAKillInsideAnActivationsRollbackEndsOnLastKnownGood(t *testing.T) {
	f := newFixture(t)
	f.assign(t, "1", "a: 1\n")
	f.promote(t, "1")
	f.assign(t, "2", "a: 2\n")
	f.put(t, "3", "a: [3\n")
	if _, err := f.node.Assign(assignment("3", 60)); err != nil {
		t.Fatal(err)
	}
	f.node.testHookInRollBack = func() { panic(crash{}) }
	func() {
		defer func() {
			if r := recover(); r != (crash{}) {
				panic(r)
			}
		}()
		_, _, _ = f.node.Activate()
		t.Fatal("the hook did not run")
	}()
	f.node = New(Options{Store: f.store, Target: f.target})
	if err := f.node.Recover(); err != nil {
		t.Fatal(err)
	}
	recs := f.records(t)
	if !records.SameSource(recs.GetActive().GetSource(), src("1")) {
		t.Fatalf("active %v after the restart; want last-known-good, as the rollback leaves it", recs.GetActive().GetSource())
	}
	if got, _ := f.targetContent(t); got != "a: 1\n" {
		t.Fatalf("the file holds %q; want last-known-good", got)
	}
}
