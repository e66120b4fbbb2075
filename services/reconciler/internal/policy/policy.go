// Package policy is the per-node lifecycle the reconciler enforces: from
// what a node should use (Desired) and what its checkpointd says (Records),
// one sync decides the next steps — checkpoint, assign, activate, promote,
// reset — and says when to look again. It talks to the node only through the
// CheckpointService client, so every transition is testable with a fake.
package policy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
)

// Mode says what kind of desired state a node has.
type Mode int

const (
	// ModeLeave: touch nothing (abandoned, or a selector conflict).
	ModeLeave Mode = iota
	// ModeReset: no config; the node uses its local default.
	ModeReset
	// ModeUse: the node should use Source.
	ModeUse
)

// Desired is what the node should use, resolved by the controller.
type Desired struct {
	Mode Mode
	// Source is pinned to a ConfigMap version (uid, resourceVersion).
	Source      *nodeconfigv1.ConfigSource
	Data        map[string]string
	Validator   nodeconfigv1.Validator
	SoakSeconds int64
	// NodeConfig names the NodeConfig that wants the config (recorded on
	// the node with the assignment).
	NodeConfig string
	// Health names the NodeConfig's own health gates, which the node
	// judges the trial by beyond its default (nil: none).
	Health *nodeconfigv1.HealthGates
	// Drain says when the node drains before the change, and within what
	// bound (nil: only when a changed field needs it).
	Drain *nodeconfigv1.DrainPolicy
	// Runs are versions with Source's bytes under another name (the
	// ConfigMap version a revision was read from): a node that runs one
	// as its active and last-known-good config needs nothing, no trial.
	Runs []*nodeconfigv1.ConfigSource
	// ResolveErr is an early error met while resolving Source (ConfigMap or
	// key missing); Source is then nil.
	ResolveErr *nodeconfigv1.ConfigError
	// Unjudged, with ModeLeave, says why the node is left as it is for now:
	// the central validator could not judge the new version. The sync fails
	// with it, to be retried with backoff. Nothing is recorded on the node,
	// which has done nothing wrong.
	Unjudged error
	// Admit asks fleet pacing whether this node may start a trial of a new
	// version now; nil admits. It is asked only when a trial would start, and
	// a yes reserves the node's place in the trial.
	Admit func() Admission
	// CheckDrift asks checkpointd to compare the target file with the
	// active config (periodic reconciles).
	CheckDrift bool
	// Depart paces a reset (ModeReset) of a node that leaves the config
	// `from`: whether it may start now, and how long it soaks. Nil resets at
	// once without a soak.
	// (from, and the NodeConfig that assigned it as the node recorded).
	Depart func(from *nodeconfigv1.ConfigSource, assignedBy string) (admission Admission, soak int64, nodeConfig string)
}

// Admission is fleet pacing's answer.
type Admission int

const (
	// Admitted: start the trial now.
	Admitted Admission = iota
	// Wait: too many nodes are on trial; try again when one finishes.
	Wait
	// Halted: this version's rollout stopped after too many rollbacks.
	Halted
)

// Event is one thing worth telling the user about.
type Event struct {
	Warning bool
	Reason  string
	Message string
}

// Result is what one sync did and what it wants next.
type Result struct {
	State   nodeconfigv1.LifecycleState
	Records *nodeconfigv1.Records
	Events  []Event
	// RequeueAfter > 0: look again then (soak end).
	RequeueAfter time.Duration
	// Err is an early error: retry with backoff. Late errors are not errors
	// here: they are a state (RolledBack) that waits for a new assignment.
	Err error
}

// soakEndSlack is how long after a soak's end the reconciler looks again,
// and how soon it retries a promote the node refused as still soaking: the
// end comes from the node's records but is read by the reconciler's clock,
// which may run a little ahead of the node's, and the node refuses to
// promote before the end by its own.
const soakEndSlack = 250 * time.Millisecond

// maxClockSkew bounds the skew a promote tolerates: a node that still says
// it is soaking this long after the end by the reconciler's clock has a
// clock gone wrong, which is reported as an error and retried with backoff.
const maxClockSkew = 30 * time.Second

// soakingRefusal is how checkpointd (lifecycle.Promote) words a refusal to
// promote before the soak's end by its clock.
const soakingRefusal = " is soaking until "

// nodeStillSoaking says whether a promote was refused only because the
// node's clock has not reached the soak end that the reconciler's clock
// passed less than maxClockSkew ago.
func nodeStillSoaking(err error, recs *nodeconfigv1.Records, now time.Time) bool {
	st := status.Convert(err)
	return st.Code() == codes.FailedPrecondition && strings.Contains(st.Message(), soakingRefusal) &&
		records.Soaking(recs) && now.Sub(records.SoakEnd(recs)) < maxClockSkew
}

// Sync runs one step of the lifecycle for one node.
func Sync(ctx context.Context, agent nodeconfigv1.CheckpointServiceClient, d Desired, now time.Time) Result {
	recsResp, err := agent.GetRecords(ctx, &nodeconfigv1.GetRecordsRequest{})
	if err != nil {
		return Result{State: nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING, Err: fmt.Errorf("%s: read records: %w", v1alpha1.NodeReasonCheckpointdUnavailable, err)}
	}
	recs := recsResp.GetRecords()
	if d.Mode == ModeReset {
		return reset(ctx, agent, recs, d, now)
	}
	// The soak is the node's own fact: a config that stayed active through
	// it is promoted whatever became of its source since — the ConfigMap
	// deleted, the NodeConfig abandoned, a newer version waiting or halted
	// — as the kubelet did, so that a later rollback returns to it.
	var promoted []Event
	if records.SoakOver(recs, now) {
		src := recs.GetAssigned().GetSource()
		resp, err := agent.PromoteLastKnownGood(ctx, &nodeconfigv1.PromoteLastKnownGoodRequest{Source: src})
		if err != nil {
			if nodeStillSoaking(err, recs, now) {
				// The node's clock trails ours: no failure, ask again shortly.
				return Result{State: nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING, Records: recs, RequeueAfter: soakEndSlack}
			}
			return failing(recs, fmt.Errorf("promote: %w", err))
		}
		recs = resp.GetRecords()
		promoted = []Event{{Reason: v1alpha1.EventConfigPromoted, Message: fmt.Sprintf("%s stayed active for its %ds soak and is now last-known-good", records.Describe(src), recs.GetAssigned().GetSoakSeconds())}}
	}
	res := syncUse(ctx, agent, recs, d, now)
	res.Events = append(promoted, res.Events...)
	if res.RequeueAfter == 0 && res.Err == nil && records.Soaking(res.Records) && !records.SoakEnd(res.Records).IsZero() {
		// Whatever holds the node, look again when its soak ends.
		res.RequeueAfter = max(records.SoakEnd(res.Records).Add(soakEndSlack).Sub(now), time.Millisecond)
	}
	return res
}

// syncUse runs the rest of a sync for a node that is not being reset.
func syncUse(ctx context.Context, agent nodeconfigv1.CheckpointServiceClient, recs *nodeconfigv1.Records, d Desired, now time.Time) Result {
	if d.Mode == ModeLeave {
		return Result{State: stateOf(recs), Records: recs, Err: d.Unjudged}
	}
	if d.ResolveErr != nil {
		return earlyError(ctx, agent, recs, d.ResolveErr)
	}
	if RunsOneOf(recs, d.Runs...) {
		return Result{State: stateOf(recs), Records: recs}
	}
	a := recs.GetAssigned()
	if records.FailedLate(recs, d.Source, d.Validator) != nil {
		// The node judged this version and rolled it back: only a new
		// version or validator is tried, so it takes no place in a trial.
		if records.SameSource(a.GetSource(), d.Source) && a.GetValidator() == d.Validator {
			return continueTrial(ctx, agent, recs, d, now)
		}
		// Assigned again, the node keeps to its verdict and runs
		// last-known-good, as the NodeConfig's other nodes that failed it.
		return startTrial(ctx, agent, recs, d, now)
	}
	if a != nil && records.SameSource(a.GetSource(), d.Source) && a.GetValidator() == d.Validator && a.GetSoakSeconds() == d.SoakSeconds &&
		proto.Equal(a.GetHealth(), d.Health) && proto.Equal(a.GetDrain(), d.Drain) {
		return continueTrial(ctx, agent, recs, d, now)
	}
	if records.SameSource(d.Source, recs.GetLastKnownGood().GetSource()) {
		// Back to the config this node already proved good (say, the
		// validator switched back after a rollback): no trial, so neither
		// pacing nor a halt holds it; the node heals at once.
		return startTrial(ctx, agent, recs, d, now)
	}
	if d.Admit != nil {
		switch d.Admit() {
		case Halted:
			if a.GetValidator() == d.Validator && records.SameSource(a.GetSource(), d.Source) && recs.GetError().GetError().GetPhase() == nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE {
				// This node's own rollback is what halted the version.
				return Result{State: nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ROLLED_BACK, Records: recs}
			}
			return Result{State: nodeconfigv1.LifecycleState_LIFECYCLE_STATE_HALTED, Records: recs}
		case Wait:
			return Result{State: nodeconfigv1.LifecycleState_LIFECYCLE_STATE_WAITING, Records: recs}
		}
	}
	return startTrial(ctx, agent, recs, d, now)
}

func reset(ctx context.Context, agent nodeconfigv1.CheckpointServiceClient, recs *nodeconfigv1.Records, d Desired, now time.Time) Result {
	if recs.GetAssigned() == nil && recs.GetActive() == nil && recs.GetLastKnownGood() == nil && recs.GetError() == nil {
		return resetSoak(Result{State: nodeconfigv1.LifecycleState_LIFECYCLE_STATE_LOCAL_DEFAULT, Records: recs}, now)
	}
	var soak int64
	var leaving string
	from := recs.GetAssigned().GetSource()
	if from == nil {
		from = recs.GetActive().GetSource()
	}
	if from != nil && d.Depart != nil {
		var admission Admission
		if admission, soak, leaving = d.Depart(from, recs.GetAssigned().GetNodeConfig()); admission != Admitted {
			// Leaving a config is a change like any other: it waits for a
			// place in the trial of the NodeConfig it leaves.
			return Result{State: nodeconfigv1.LifecycleState_LIFECYCLE_STATE_WAITING, Records: recs}
		}
	}
	resp, err := agent.Reset(ctx, &nodeconfigv1.ResetRequest{SoakSeconds: soak, NodeConfig: leaving})
	if err != nil {
		return Result{State: nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING, Records: recs, Err: fmt.Errorf("reset: %w", err)}
	}
	return resetSoak(Result{
		State: nodeconfigv1.LifecycleState_LIFECYCLE_STATE_LOCAL_DEFAULT, Records: resp.GetRecords(),
		Events: []Event{{Reason: v1alpha1.EventConfigAssigned, Message: fmt.Sprintf("no config assigned: reset to the local default (assigned, active and last-known-good cleared; soak %ds)", soak)}},
	}, now)
}

// resetSoak looks again at a reset node when its reset's soak ends, so that
// the departures waiting behind it are admitted then.
func resetSoak(res Result, now time.Time) Result {
	if !records.ResetSoaking(res.Records, now) {
		return res
	}
	if end := records.ResetSoakEnd(res.Records); end.IsZero() {
		// The consumer is not healthy on the local default yet.
		res.RequeueAfter = ConsumerPoll
	} else {
		// No soakEndSlack: the reconciler alone judges this end, by its
		// own clock; the node refuses nothing by it.
		res.RequeueAfter = max(end.Sub(now), time.Millisecond)
	}
	return res
}

// earlyError records the error on the node (so its status says why) and
// asks for a retry with backoff. Nothing rolls back.
func earlyError(ctx context.Context, agent nodeconfigv1.CheckpointServiceClient, recs *nodeconfigv1.Records, e *nodeconfigv1.ConfigError) Result {
	res := Result{State: nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING, Records: recs, Err: fmt.Errorf("%s: %s", e.GetReason(), e.GetMessage())}
	if resp, err := agent.SetError(ctx, &nodeconfigv1.SetErrorRequest{Error: e}); err == nil {
		res.Records = resp.GetRecords()
	}
	return res
}

func startTrial(ctx context.Context, agent nodeconfigv1.CheckpointServiceClient, recs *nodeconfigv1.Records, d Desired, now time.Time) Result {
	src := d.Source
	// Checkpoint first: assigned must only ever name a config on disk. The
	// put is idempotent, and a node seldom has the version already, so it
	// is sent without asking first: a lookup would cost every node a round
	// trip and, when found, carry the same data back.
	if _, err := agent.PutCheckpoint(ctx, &nodeconfigv1.PutCheckpointRequest{Source: src, Data: d.Data}); err != nil {
		if unreachable(err) {
			return agentFailed(ctx, agent, recs, "checkpoint", err)
		}
		e := &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY, Reason: v1alpha1.NodeReasonCheckpointFailed,
			Message: fmt.Sprintf("checkpoint %s: %v", records.Describe(src), status.Convert(err).Message())}
		return earlyError(ctx, agent, recs, e)
	}
	resp, err := agent.SetAssigned(ctx, &nodeconfigv1.SetAssignedRequest{Source: src, SoakSeconds: d.SoakSeconds, Validator: d.Validator, NodeConfig: d.NodeConfig, Health: d.Health, Drain: d.Drain})
	if err != nil {
		e := &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY, Reason: v1alpha1.NodeReasonCheckpointFailed,
			Message: fmt.Sprintf("record assigned %s: %v", records.Describe(src), status.Convert(err).Message())}
		return earlyError(ctx, agent, recs, e)
	}
	if r := resp.GetRecords(); r != nil {
		// An activation that fails unreached reports these: they say the
		// trial started.
		recs = r
	}
	res := activate(ctx, agent, recs, now)
	// One event per node per change: the activation's (or rollback's) event
	// says it was just assigned; API writes are what fleets pay for.
	assigned := fmt.Sprintf("assigned %s (soak %ds)", records.Describe(src), d.SoakSeconds)
	if len(res.Events) > 0 {
		res.Events[0].Message = assigned + "; " + res.Events[0].Message
	} else {
		res.Events = []Event{{Reason: v1alpha1.EventConfigAssigned, Message: assigned}}
	}
	return res
}

func activate(ctx context.Context, agent nodeconfigv1.CheckpointServiceClient, recs *nodeconfigv1.Records, now time.Time) Result {
	resp, err := agent.Activate(ctx, &nodeconfigv1.ActivateRequest{})
	if err != nil {
		return agentFailed(ctx, agent, recs, "activate", err)
	}
	recs = resp.GetRecords()
	src := recs.GetAssigned().GetSource()
	switch resp.GetOutcome() {
	case nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ROLLED_BACK:
		return Result{
			State: nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ROLLED_BACK, Records: recs,
			Events: []Event{{Warning: true, Reason: v1alpha1.EventConfigRolledBack, Message: fmt.Sprintf("%s; rolled back to %s", recs.GetError().GetError().GetMessage(), records.Describe(recs.GetActive().GetSource()))}},
		}
	case nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_DRAINING:
		// The node drains before the change and activates it by itself
		// then: on trial all along (it counts in maxInTrial), looked at
		// as often as a restart is.
		return Result{State: nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING, Records: recs, RequeueAfter: ConsumerPoll}
	case nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED:
		res := afterActive(recs, now)
		res.Events = append([]Event{{Reason: v1alpha1.EventConfigActivated, Message: fmt.Sprintf("activated %s", records.Describe(src))}}, res.Events...)
		return res
	default:
		return Result{State: stateOf(recs), Records: recs}
	}
}

// continueTrial handles a node that already has the desired assignment.
func continueTrial(ctx context.Context, agent nodeconfigv1.CheckpointServiceClient, recs *nodeconfigv1.Records, d Desired, now time.Time) Result {
	if recs.GetError().GetError().GetPhase() == nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE {
		// A late error is fixed by a new assignment, not by retrying; a
		// rollback that did not finish (its file could not be written) is
		// finished by the node's Activate, which runs last-known-good.
		if records.RollbackUnfinished(recs) {
			return activate(ctx, agent, recs, now)
		}
		return Result{State: nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ROLLED_BACK, Records: recs}
	}
	if !records.SameSource(recs.GetAssigned().GetSource(), recs.GetActive().GetSource()) {
		// Assigned but not active: a crash between the two steps.
		return activate(ctx, agent, recs, now)
	}
	if recs.GetError() != nil && (!d.CheckDrift || !records.NodeClears(recs.GetError().GetError().GetReason())) {
		// An early error from an earlier attempt is resolved now; one about
		// the node's own file (a failed write, a kubelet without
		// --config-dir) is checkpointd's to clear, once the drift check
		// below puts the file in place.
		if resp, err := agent.SetError(ctx, &nodeconfigv1.SetErrorRequest{}); err == nil {
			recs = resp.GetRecords()
		}
	}
	var events []Event
	if d.CheckDrift {
		resp, err := agent.RepairDrift(ctx, &nodeconfigv1.RepairDriftRequest{})
		if err != nil {
			return agentFailed(ctx, agent, recs, "repair drift", err)
		}
		if resp.GetRepaired() {
			events = append(events, Event{Warning: true, Reason: v1alpha1.EventDriftCorrected, Message: "the materialized config file differed from the active checkpoint and was rewritten"})
		}
		if recs.GetError() != nil {
			// The write cleared checkpointd's own error.
			if r, err := agent.GetRecords(ctx, &nodeconfigv1.GetRecordsRequest{}); err == nil {
				recs = r.GetRecords()
			}
		}
	}
	res := afterActive(recs, now)
	res.Events = append(events, res.Events...)
	return res
}

// ConsumerPoll is how often a node whose soak waits on its consumer is
// looked at again.
const ConsumerPoll = 2 * time.Second

// afterActive says when to look again at a node whose assigned config is active.
func afterActive(recs *nodeconfigv1.Records, now time.Time) Result {
	if records.Soaking(recs) {
		wait := records.SoakEnd(recs).Add(soakEndSlack).Sub(now)
		if records.SoakEnd(recs).IsZero() {
			// The node is still restarting its consumer onto the config or
			// waiting for it to be healthy: the soak has not begun.
			wait = ConsumerPoll
		} else if wait <= 0 {
			wait = time.Millisecond
		}
		return Result{State: nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING, Records: recs, RequeueAfter: wait}
	}
	return Result{State: stateOf(recs), Records: recs}
}

// agentFailed is a failed call that changes the node: checkpointd records
// a failure to write the file as an early error, so unless the agent could
// not be reached, the node's own words are reported.
func agentFailed(ctx context.Context, agent nodeconfigv1.CheckpointServiceClient, recs *nodeconfigv1.Records, what string, err error) Result {
	if !unreachable(err) {
		if r, gerr := agent.GetRecords(ctx, &nodeconfigv1.GetRecordsRequest{}); gerr == nil {
			if e := r.GetRecords().GetError().GetError(); e.GetPhase() == nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY {
				return failing(r.GetRecords(), fmt.Errorf("%s: %s", e.GetReason(), e.GetMessage()))
			}
		}
	}
	return failing(recs, fmt.Errorf("%s: %s: %w", v1alpha1.NodeReasonCheckpointdUnavailable, what, err))
}

// unreachable says whether a call failed before the agent could answer it.
func unreachable(err error) bool {
	c := status.Code(err)
	return c == codes.Unavailable || c == codes.DeadlineExceeded || c == codes.Canceled
}

func failing(recs *nodeconfigv1.Records, err error) Result {
	return Result{State: nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING, Records: recs, Err: err}
}

// stateOf reads the lifecycle state from the records alone.
func stateOf(recs *nodeconfigv1.Records) nodeconfigv1.LifecycleState {
	switch {
	case recs.GetError().GetError().GetPhase() == nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE:
		return nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ROLLED_BACK
	case recs.GetError() != nil:
		return nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING
	case recs.GetAssigned() == nil:
		return nodeconfigv1.LifecycleState_LIFECYCLE_STATE_LOCAL_DEFAULT
	case records.Soaking(recs), records.SameSource(recs.GetDrain().GetSource(), recs.GetAssigned().GetSource()):
		// A node that drains for its change is on trial as one that soaks it.
		return nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING
	case records.SameSource(recs.GetAssigned().GetSource(), recs.GetLastKnownGood().GetSource()):
		return nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ACTIVE
	default:
		return nodeconfigv1.LifecycleState_LIFECYCLE_STATE_UNSPECIFIED
	}
}

// RunsOneOf says whether the node runs one of same as its active and
// last-known-good config (the two may name it differently).
func RunsOneOf(recs *nodeconfigv1.Records, same ...*nodeconfigv1.ConfigSource) bool {
	is := func(s *nodeconfigv1.ConfigSource) bool {
		return slices.ContainsFunc(same, func(o *nodeconfigv1.ConfigSource) bool { return records.SameSource(s, o) })
	}
	return is(recs.GetActive().GetSource()) && is(recs.GetLastKnownGood().GetSource())
}
