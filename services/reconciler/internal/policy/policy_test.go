package policy

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
)

// fakeAgent is an in-memory checkpointd with switches for failures.
type fakeAgent struct {
	nodeconfigv1.CheckpointServiceClient
	now         time.Time
	recs        *nodeconfigv1.Records
	checkpoints map[string]bool
	calls       []string

	down, lateError, drift bool
	// draining, when set, has Activate answer that the node drains first,
	// as checkpointd does for a change that needs a drain; drainFailed,
	// that its last drain failed (an early error).
	draining, drainFailed bool
	putErr                error // what PutCheckpoint answers, when set
	// repairErr, when set, is the early error RepairDrift records and
	// fails with, as checkpointd's for a file it cannot put in place.
	repairErr  *nodeconfigv1.ConfigError
	promoteErr error // what PromoteLastKnownGood answers, when set
	// clock, when set, is the node's own clock: Promote refuses before the
	// records' soak end by it, as checkpointd does.
	clock time.Time
}

func newFake(now time.Time) *fakeAgent {
	return &fakeAgent{now: now, recs: &nodeconfigv1.Records{}, checkpoints: map[string]bool{}}
}

var errDown = status.Error(codes.Unavailable, "connection refused")

func (f *fakeAgent) call(name string) error {
	f.calls = append(f.calls, name)
	if f.down {
		return errDown
	}
	return nil
}

func (f *fakeAgent) out() *nodeconfigv1.Records { return proto.Clone(f.recs).(*nodeconfigv1.Records) }

func (f *fakeAgent) GetRecords(context.Context, *nodeconfigv1.GetRecordsRequest, ...grpc.CallOption) (*nodeconfigv1.GetRecordsResponse, error) {
	if err := f.call("GetRecords"); err != nil {
		return nil, err
	}
	return &nodeconfigv1.GetRecordsResponse{Records: f.out()}, nil
}

// GetCheckpoint is recorded, so the call lists show a sync that looks one up.
func (f *fakeAgent) GetCheckpoint(context.Context, *nodeconfigv1.GetCheckpointRequest, ...grpc.CallOption) (*nodeconfigv1.GetCheckpointResponse, error) {
	if err := f.call("GetCheckpoint"); err != nil {
		return nil, err
	}
	return nil, status.Error(codes.Unimplemented, "the reconciler sends a checkpoint without looking it up")
}

func (f *fakeAgent) PutCheckpoint(_ context.Context, r *nodeconfigv1.PutCheckpointRequest, _ ...grpc.CallOption) (*nodeconfigv1.PutCheckpointResponse, error) {
	if err := f.call("PutCheckpoint"); err != nil {
		return nil, err
	}
	if f.putErr != nil {
		return nil, f.putErr
	}
	f.checkpoints[r.GetSource().GetUid()+"/"+r.GetSource().GetResourceVersion()] = true
	return &nodeconfigv1.PutCheckpointResponse{Created: true}, nil
}

func (f *fakeAgent) SetAssigned(_ context.Context, r *nodeconfigv1.SetAssignedRequest, _ ...grpc.CallOption) (*nodeconfigv1.SetAssignedResponse, error) {
	if err := f.call("SetAssigned"); err != nil {
		return nil, err
	}
	if !f.checkpoints[r.GetSource().GetUid()+"/"+r.GetSource().GetResourceVersion()] {
		return nil, status.Error(codes.FailedPrecondition, "no checkpoint")
	}
	f.recs.Assigned = &nodeconfigv1.AssignedRecord{Source: r.GetSource(), SoakSeconds: r.GetSoakSeconds(), Validator: r.GetValidator(), WrittenAt: timestamppb.New(f.now), Drain: r.GetDrain()}
	f.recs.Error = nil
	return &nodeconfigv1.SetAssignedResponse{Records: f.out()}, nil
}

func (f *fakeAgent) Activate(context.Context, *nodeconfigv1.ActivateRequest, ...grpc.CallOption) (*nodeconfigv1.ActivateResponse, error) {
	if err := f.call("Activate"); err != nil {
		return nil, err
	}
	if a := f.recs.GetAssigned(); f.lateError || records.FailedLate(f.recs, a.GetSource(), a.GetValidator()) != nil {
		// As checkpointd: a version that fails, or failed here before,
		// leaves last-known-good active.
		f.recs.Active = f.recs.GetLastKnownGood()
		f.recs.Error = &nodeconfigv1.ErrorRecord{Error: &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE, Reason: "ValidationFailed", Message: "bad"}}
		return &nodeconfigv1.ActivateResponse{Outcome: nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ROLLED_BACK, Records: f.out()}, nil
	}
	if f.drainFailed {
		f.recs.Error = &nodeconfigv1.ErrorRecord{Error: &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY, Reason: records.ReasonDrainFailed, Message: "1 pods left on the node: app/blocker"}}
		return nil, status.Error(codes.FailedPrecondition, "app/blocker (recorded as an early error DrainFailed; retry)")
	}
	if f.draining {
		f.recs.Drain = &nodeconfigv1.DrainRecord{Source: f.recs.GetAssigned().GetSource(), Phase: nodeconfigv1.DrainPhase_DRAIN_PHASE_DRAINING}
		return &nodeconfigv1.ActivateResponse{Outcome: nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_DRAINING, Records: f.out()}, nil
	}
	if !records.SameSource(f.recs.GetActive().GetSource(), f.recs.GetAssigned().GetSource()) {
		f.recs.Active = &nodeconfigv1.SourceRecord{Source: f.recs.GetAssigned().GetSource(), WrittenAt: timestamppb.New(f.now)}
	}
	f.recs.Error = nil
	return &nodeconfigv1.ActivateResponse{Outcome: nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED, Records: f.out()}, nil
}

func (f *fakeAgent) PromoteLastKnownGood(_ context.Context, r *nodeconfigv1.PromoteLastKnownGoodRequest, _ ...grpc.CallOption) (*nodeconfigv1.PromoteLastKnownGoodResponse, error) {
	if err := f.call("Promote"); err != nil {
		return nil, err
	}
	if f.promoteErr != nil {
		return nil, f.promoteErr
	}
	if end := records.SoakEnd(f.recs); !f.clock.IsZero() && f.clock.Before(end) {
		// checkpointd's words (lifecycle.Promote) and code (grpcapi).
		s := r.GetSource()
		return nil, status.Errorf(codes.FailedPrecondition, "cannot promote: %s/%s key %s (uid %s, resourceVersion %s) is soaking until %s",
			s.GetNamespace(), s.GetName(), s.GetKey(), s.GetUid(), s.GetResourceVersion(), end.UTC().Format(time.RFC3339))
	}
	f.recs.LastKnownGood = &nodeconfigv1.SourceRecord{Source: r.GetSource()}
	return &nodeconfigv1.PromoteLastKnownGoodResponse{Records: f.out()}, nil
}

func (f *fakeAgent) SetError(_ context.Context, r *nodeconfigv1.SetErrorRequest, _ ...grpc.CallOption) (*nodeconfigv1.SetErrorResponse, error) {
	if err := f.call("SetError"); err != nil {
		return nil, err
	}
	if r.GetError() == nil {
		f.recs.Error = nil
	} else {
		f.recs.Error = &nodeconfigv1.ErrorRecord{Error: r.GetError()}
	}
	return &nodeconfigv1.SetErrorResponse{Records: f.out()}, nil
}

func (f *fakeAgent) Reset(context.Context, *nodeconfigv1.ResetRequest, ...grpc.CallOption) (*nodeconfigv1.ResetResponse, error) {
	if err := f.call("Reset"); err != nil {
		return nil, err
	}
	f.recs = &nodeconfigv1.Records{}
	return &nodeconfigv1.ResetResponse{Records: f.out()}, nil
}

func (f *fakeAgent) RepairDrift(context.Context, *nodeconfigv1.RepairDriftRequest, ...grpc.CallOption) (*nodeconfigv1.RepairDriftResponse, error) {
	if err := f.call("RepairDrift"); err != nil {
		return nil, err
	}
	if f.repairErr != nil {
		f.recs.Error = &nodeconfigv1.ErrorRecord{Error: f.repairErr}
		return nil, status.Error(codes.FailedPrecondition, f.repairErr.GetMessage())
	}
	repaired := f.drift
	f.drift = false
	return &nodeconfigv1.RepairDriftResponse{Repaired: repaired}, nil
}

var t0 = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

func src(rv string) *nodeconfigv1.ConfigSource {
	return &nodeconfigv1.ConfigSource{Namespace: "ns", Name: "cm", Uid: "u", ResourceVersion: rv, Key: "k"}
}

func use(rv string) Desired {
	return Desired{Mode: ModeUse, Source: src(rv), Data: map[string]string{"k": "v"}, Validator: nodeconfigv1.Validator_VALIDATOR_YAML, SoakSeconds: 600, CheckDrift: true}
}

func hasEvent(r Result, reason string) bool {
	for _, e := range r.Events {
		if e.Reason == reason {
			return true
		}
	}
	return false
}

func TestNewAssignmentCheckpointsAssignsActivatesAndWaitsForSoak(t *testing.T) {
	f := newFake(t0)
	r := Sync(context.Background(), f, use("1"), t0)
	if r.Err != nil || r.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING || r.RequeueAfter != 600*time.Second+soakEndSlack {
		t.Fatalf("result %+v", r)
	}
	want := []string{"GetRecords", "PutCheckpoint", "SetAssigned", "Activate"}
	if len(f.calls) != len(want) {
		t.Fatalf("calls %v, want %v", f.calls, want)
	}
	for i := range want {
		if f.calls[i] != want[i] {
			t.Fatalf("calls %v, want %v (checkpoint before assign)", f.calls, want)
		}
	}
	if len(r.Events) != 1 || !hasEvent(r, v1alpha1.EventConfigActivated) || !strings.Contains(r.Events[0].Message, "assigned") {
		t.Fatalf("events %v, want one ConfigActivated that says it was assigned", r.Events)
	}
}

func TestSoakEndPromotesOnlyAtTheDurableEnd(t *testing.T) {
	f := newFake(t0)
	Sync(context.Background(), f, use("1"), t0)
	r := Sync(context.Background(), f, use("1"), t0.Add(599*time.Second))
	if r.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING || r.RequeueAfter != time.Second+soakEndSlack || f.recs.LastKnownGood != nil {
		t.Fatalf("before the end: %+v", r)
	}
	r = Sync(context.Background(), f, use("1"), t0.Add(600*time.Second))
	if r.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ACTIVE || !hasEvent(r, v1alpha1.EventConfigPromoted) || !records.SameSource(f.recs.GetLastKnownGood().GetSource(), src("1")) {
		t.Fatalf("at the end: %+v", r)
	}
	// Steady state: one drift check, no writes.
	f.calls = nil
	r = Sync(context.Background(), f, use("1"), t0.Add(time.Hour))
	if r.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ACTIVE || len(f.calls) != 2 || hasEvent(r, v1alpha1.EventConfigPromoted) {
		t.Fatalf("steady state: %+v calls %v", r, f.calls)
	}
}

func TestLateErrorRollsBackAndIsNotRetried(t *testing.T) {
	f := newFake(t0)
	f.lateError = true
	r := Sync(context.Background(), f, use("1"), t0)
	if r.Err != nil || r.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ROLLED_BACK || !hasEvent(r, v1alpha1.EventConfigRolledBack) {
		t.Fatalf("result %+v", r)
	}
	f.calls = nil
	r = Sync(context.Background(), f, use("1"), t0.Add(time.Minute))
	if r.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ROLLED_BACK || len(f.calls) != 1 {
		t.Fatalf("retried a late error: %+v calls %v", r, f.calls)
	}
	// A new version is a new try.
	f.lateError = false
	r = Sync(context.Background(), f, use("2"), t0.Add(2*time.Minute))
	if r.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING {
		t.Fatalf("new version: %+v", r)
	}
}

func TestEarlyErrorsRecordAndRetryWithoutRollback(t *testing.T) {
	f := newFake(t0)
	Sync(context.Background(), f, use("1"), t0)
	Sync(context.Background(), f, use("1"), t0.Add(time.Hour)) // promoted
	// ConfigMap gone: a resolve error.
	d := Desired{Mode: ModeUse, ResolveErr: &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY, Reason: v1alpha1.NodeReasonDownloadFailed, Message: "ConfigMap ns/cm not found"}}
	r := Sync(context.Background(), f, d, t0.Add(2*time.Hour))
	if r.Err == nil || r.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING || f.recs.GetError().GetError().GetReason() != v1alpha1.NodeReasonDownloadFailed {
		t.Fatalf("resolve error: %+v", r)
	}
	if !records.SameSource(f.recs.GetActive().GetSource(), src("1")) {
		t.Fatal("an early error rolled back")
	}
	// The agent stops answering at the put: nothing is recorded on the
	// node, and the reason says it could not be reached.
	f.putErr = errDown
	r = Sync(context.Background(), f, use("2"), t0.Add(150*time.Minute))
	if r.Err == nil || !strings.HasPrefix(r.Err.Error(), v1alpha1.NodeReasonCheckpointdUnavailable) || f.recs.GetError().GetError().GetReason() != v1alpha1.NodeReasonDownloadFailed {
		t.Fatalf("agent unreachable at the put: %+v records %v", r, f.recs)
	}
	// Checkpoint write fails.
	f.putErr = status.Error(codes.Internal, "no space left on device")
	r = Sync(context.Background(), f, use("2"), t0.Add(3*time.Hour))
	if r.Err == nil || f.recs.GetError().GetError().GetReason() != v1alpha1.NodeReasonCheckpointFailed || !records.SameSource(f.recs.GetAssigned().GetSource(), src("1")) {
		t.Fatalf("checkpoint failure: %+v records %v", r, f.recs)
	}
	// Agent down.
	f.down = true
	r = Sync(context.Background(), f, use("2"), t0.Add(4*time.Hour))
	if r.Err == nil || r.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING {
		t.Fatalf("agent down: %+v", r)
	}
	// Heals.
	f.down, f.putErr = false, nil
	r = Sync(context.Background(), f, use("2"), t0.Add(5*time.Hour))
	if r.Err != nil || r.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING || f.recs.GetError() != nil {
		t.Fatalf("healed: %+v", r)
	}
}

func TestResetLeaveAndPacing(t *testing.T) {
	f := newFake(t0)
	Sync(context.Background(), f, use("1"), t0)
	r := Sync(context.Background(), f, Desired{Mode: ModeLeave}, t0)
	if len(f.calls) != 5 || r.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING {
		t.Fatalf("leave touched the node: %v", f.calls)
	}
	r = Sync(context.Background(), f, Desired{Mode: ModeReset}, t0)
	if r.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_LOCAL_DEFAULT || f.recs.GetAssigned() != nil || f.recs.GetLastKnownGood() != nil {
		t.Fatalf("reset: %+v", r)
	}
	f.calls = nil
	Sync(context.Background(), f, Desired{Mode: ModeReset}, t0)
	if len(f.calls) != 1 {
		t.Fatalf("reset of an empty node wrote: %v", f.calls)
	}
	for admission, want := range map[Admission]nodeconfigv1.LifecycleState{
		Wait:   nodeconfigv1.LifecycleState_LIFECYCLE_STATE_WAITING,
		Halted: nodeconfigv1.LifecycleState_LIFECYCLE_STATE_HALTED,
	} {
		d := use("3")
		d.Admit = func() Admission { return admission }
		f.calls = nil
		r := Sync(context.Background(), f, d, t0)
		if r.State != want || len(f.calls) != 1 {
			t.Fatalf("admission %v: %+v calls %v", admission, r, f.calls)
		}
	}
}

// A node held while the central validator cannot judge the new version
// keeps what it runs, nothing is written to it, and the sync fails with the
// reason so that it is retried with backoff.
func TestHeldNodeIsLeftAndRetried(t *testing.T) {
	f := newFake(t0)
	Sync(context.Background(), f, use("1"), t0)
	f.calls = nil
	held := errors.New("the kubelet validator could not run: /bin/nodeconfig-kubelet-check: no such file or directory")
	r := Sync(context.Background(), f, Desired{Mode: ModeLeave, Unjudged: held}, t0.Add(time.Second))
	if !errors.Is(r.Err, held) || r.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING {
		t.Fatalf("held: %+v, want the node soaking as before and the sync failing with the reason", r)
	}
	if len(f.calls) != 1 || f.recs.GetError() != nil {
		t.Fatalf("held node written to: calls %v, error %v", f.calls, f.recs.GetError())
	}
}

func TestDriftIsRepairedAndEvented(t *testing.T) {
	f := newFake(t0)
	Sync(context.Background(), f, use("1"), t0)
	f.drift = true
	r := Sync(context.Background(), f, use("1"), t0.Add(time.Second))
	if !hasEvent(r, v1alpha1.EventDriftCorrected) {
		t.Fatalf("no DriftCorrected event: %+v", r)
	}
}

func TestCrashBetweenAssignAndActivateIsFinished(t *testing.T) {
	f := newFake(t0)
	f.checkpoints["u/1"] = true
	f.recs.Assigned = &nodeconfigv1.AssignedRecord{Source: src("1"), SoakSeconds: 600, Validator: nodeconfigv1.Validator_VALIDATOR_YAML, WrittenAt: timestamppb.New(t0)}
	r := Sync(context.Background(), f, use("1"), t0.Add(time.Second))
	if r.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING || r.RequeueAfter != 599*time.Second+soakEndSlack {
		t.Fatalf("result %+v (the soak clock must run from the durable activation)", r)
	}
}

// A config that stayed active through its soak is promoted on the node's
// own records whatever holds the node now: its ConfigMap gone (an early
// error), the NodeConfig abandoned (leave), or a newer version waiting for
// pacing or halted. A later rollback then returns to it.
func TestSoakedConfigIsPromotedWhateverHoldsTheNode(t *testing.T) {
	for name, d := range map[string]Desired{
		"ConfigMap deleted": {Mode: ModeUse, ResolveErr: &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY, Reason: v1alpha1.NodeReasonDownloadFailed, Message: "gone"}},
		"abandoned":         {Mode: ModeLeave},
		"newer unjudged":    {Mode: ModeLeave, Unjudged: errors.New("the kubelet validator could not run")},
		"newer waits":       func() Desired { d := use("2"); d.Admit = func() Admission { return Wait }; return d }(),
		"newer halted":      func() Desired { d := use("2"); d.Admit = func() Admission { return Halted }; return d }(),
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t0)
			Sync(context.Background(), f, use("1"), t0)
			r := Sync(context.Background(), f, d, t0.Add(time.Second))
			if r.RequeueAfter != 599*time.Second+soakEndSlack && r.Err == nil {
				t.Fatalf("mid-soak: look again in %v, want just after the soak's end", r.RequeueAfter)
			}
			r = Sync(context.Background(), f, d, t0.Add(600*time.Second))
			if !records.SameSource(f.recs.GetLastKnownGood().GetSource(), src("1")) || !hasEvent(r, v1alpha1.EventConfigPromoted) {
				t.Fatalf("after the soak: last-known-good %v, events %v; want version 1 promoted", f.recs.GetLastKnownGood(), r.Events)
			}
		})
	}
}

// A change the node drains for first: the NodeConfig's drain reaches the
// node with the assignment; the node is on trial while it drains, looked
// at as often as a restart; a failed drain is the node's early error, kept
// (not cleared by the sync) and retried with backoff.
func TestADrainingNodeIsOnTrialAndItsDrainFailureIsKept(t *testing.T) {
	f := newFake(t0)
	f.draining = true
	d := use("1")
	d.Drain = &nodeconfigv1.DrainPolicy{Always: true, TimeoutSeconds: 60}
	r := Sync(context.Background(), f, d, t0)
	if r.Err != nil || r.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING || r.RequeueAfter != ConsumerPoll {
		t.Fatalf("result %+v; want SOAKING, looked at again in %s", r, ConsumerPoll)
	}
	if !proto.Equal(f.recs.GetAssigned().GetDrain(), d.Drain) {
		t.Fatalf("assigned %v; want the NodeConfig's drain sent with it", f.recs.GetAssigned())
	}
	if got := stateOf(f.out()); got != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING {
		t.Fatalf("the records of a draining node read as %v; want SOAKING", got)
	}
	f.calls = nil
	r = Sync(context.Background(), f, d, t0)
	if r.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING || !slices.Equal(f.calls, []string{"GetRecords", "Activate"}) {
		t.Fatalf("result %+v, calls %v; want the same assignment asked to activate again", r, f.calls)
	}
	f.draining, f.drainFailed = false, true
	f.calls = nil
	r = Sync(context.Background(), f, d, t0)
	if r.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING || r.Err == nil || !strings.Contains(r.Err.Error(), "DrainFailed: 1 pods left on the node: app/blocker") || slices.Contains(f.calls, "SetError") {
		t.Fatalf("result %+v, calls %v; want FAILING with the node's DrainFailed, not cleared", r, f.calls)
	}
	f.drainFailed = false
	f.recs.Drain = nil
	r = Sync(context.Background(), f, d, t0)
	if r.Err != nil || r.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING || !records.SameSource(f.recs.GetActive().GetSource(), src("1")) {
		t.Fatalf("result %+v; want the change active once drained", r)
	}
}

// An early error checkpointd records about its own file (a kubelet with
// no --config-dir, a write that failed) is checkpointd's to clear: a sync
// that cleared it before the drift repair that records it again would
// make the Node's condition flap at every resync.
func TestEarlyErrorsOfTheNodesFileAreLeftToIt(t *testing.T) {
	for _, reason := range []string{records.ReasonKubeletNoConfigDir, records.ReasonWriteFailed} {
		f := newFake(t0)
		Sync(context.Background(), f, use("1"), t0)
		Sync(context.Background(), f, use("1"), t0.Add(time.Hour)) // promoted
		f.repairErr = &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY, Reason: reason, Message: "add --config-dir=/etc/kubernetes/kubelet.conf.d"}
		for i := range 2 {
			f.calls = nil
			r := Sync(context.Background(), f, use("1"), t0.Add(time.Duration(2+i)*time.Hour))
			if r.Err == nil || !strings.HasPrefix(r.Err.Error(), reason) || r.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING {
				t.Fatalf("%s, sync %d: %+v", reason, i, r)
			}
			if slices.Contains(f.calls, "SetError") {
				t.Fatalf("%s, sync %d: the reconciler cleared the node's own error (calls %v)", reason, i, f.calls)
			}
		}
	}
}
