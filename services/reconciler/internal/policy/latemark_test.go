package policy

import (
	"context"
	"slices"
	"testing"
	"time"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// failedLateOn makes the fake node run version lkg with version bad marked
// as failed late, as checkpointd records a rollback.
func failedLateOn(f *fakeAgent, lkg, bad string) {
	late := &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE, Reason: records.ReasonConsumerUnhealthy, Message: "the kubelet turned unhealthy"}
	f.recs = &nodeconfigv1.Records{
		Assigned:      &nodeconfigv1.AssignedRecord{Source: src(bad), SoakSeconds: 600, Validator: nodeconfigv1.Validator_VALIDATOR_YAML},
		Active:        &nodeconfigv1.SourceRecord{Source: src(lkg)},
		LastKnownGood: &nodeconfigv1.SourceRecord{Source: src(lkg)},
		Error:         &nodeconfigv1.ErrorRecord{Error: late},
		Failed:        []*nodeconfigv1.FailedVersion{{Source: src(bad), Validator: nodeconfigv1.Validator_VALIDATOR_YAML, Error: late}},
	}
	f.checkpoints["u/"+lkg], f.checkpoints["u/"+bad] = true, true
}

// A version the node marked as failed late takes no place in the trial and
// is never sent to the node again: a soak edit, or a return to it after
// another version, is no new judgement.
func TestAVersionThatFailedLateStartsNoTrialAgain(t *testing.T) {
	for name, prepare := range map[string]func(f *fakeAgent) Desired{
		"soak edited": func(f *fakeAgent) Desired {
			d := use("2")
			d.SoakSeconds = 60
			return d
		},
		"back after another version": func(f *fakeAgent) Desired {
			f.recs.Assigned = &nodeconfigv1.AssignedRecord{Source: src("3"), SoakSeconds: 600, Validator: nodeconfigv1.Validator_VALIDATOR_YAML}
			f.recs.Active = &nodeconfigv1.SourceRecord{Source: src("3")}
			f.recs.LastKnownGood = &nodeconfigv1.SourceRecord{Source: src("3")}
			f.recs.Error = nil
			return use("2")
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t0)
			failedLateOn(f, "1", "2")
			d := prepare(f)
			admitted := false
			d.Admit = func() Admission { admitted = true; return Admitted }
			r := Sync(context.Background(), f, d, t0.Add(time.Hour))
			if r.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ROLLED_BACK || admitted {
				t.Fatalf("state %v, admitted %v; want ROLLED_BACK and no place taken in the trial", r.State, admitted)
			}
			if name == "soak edited" && slices.ContainsFunc(f.calls, func(c string) bool { return c != "GetRecords" }) {
				t.Fatalf("calls %v: the marked version, assigned already, was sent to the node again", f.calls)
			}
			// Assigned again after another version, the node keeps to
			// its verdict: last-known-good active.
			if !records.SameSource(f.recs.GetActive().GetSource(), f.recs.GetLastKnownGood().GetSource()) {
				t.Fatalf("records %v; want last-known-good active", f.recs)
			}
		})
	}
}

// A rollback whose file could not be written (a full disk) left the failed
// version active with its verdict recorded: the next sync has the node
// finish it, rather than leave it there while the agent runs.
func TestARollbackLeftUnfinishedIsFinished(t *testing.T) {
	f := newFake(t0)
	failedLateOn(f, "1", "2")
	f.recs.Active = &nodeconfigv1.SourceRecord{Source: src("2")}
	r := Sync(context.Background(), f, use("2"), t0.Add(time.Hour))
	if r.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ROLLED_BACK || !records.SameSource(f.recs.GetActive().GetSource(), src("1")) {
		t.Fatalf("state %v, active %v; want ROLLED_BACK on last-known-good 1", r.State, f.recs.GetActive().GetSource())
	}
}
