package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/configcheck/disruption"
)

// Drainer empties the node before a change that needs it (internal/drain).
type Drainer interface {
	// Cordoned says whether the node is unschedulable now.
	Cordoned(ctx context.Context) (bool, error)
	// Cordon and Uncordon set the node's spec.unschedulable.
	Cordon(ctx context.Context) error
	Uncordon(ctx context.Context) error
	// Evict evicts the node's pods until none a drain moves is left, or
	// ctx ends (an error naming the pods left).
	Evict(ctx context.Context) error
}

// drainWhy says why the assigned change drains the node first ("" when it
// does not): the kubelet fields that need it, or the NodeConfig's drain on
// every change that restarts the kubelet.
func drainWhy(assigned *nodeconfigv1.AssignedRecord, plan disruption.Plan, known bool) string {
	if known && len(plan.Drain) > 0 {
		return fmt.Sprintf("the kubelet fields %s change (docs/disruption.md)", strings.Join(plan.Drain, ", "))
	}
	if assigned.GetDrain().GetAlways() && (!known || plan.Restart()) {
		return "spec.rollout.drain.when is " + v1alpha1.DrainAlways
	}
	return ""
}

// drainTimeout is the bound of the assigned config's drains.
func drainTimeout(a *nodeconfigv1.AssignedRecord) time.Duration {
	if s := a.GetDrain().GetTimeoutSeconds(); s > 0 {
		return time.Duration(s) * time.Second
	}
	return v1alpha1.DefaultDrainTimeoutSeconds * time.Second
}

// drainRetryAfter is how long a failed drain waits before the next: as
// long as the drain may take, so that a node a budget holds is cordoned
// at most half the time, and within a minute and an hour.
func drainRetryAfter(timeout time.Duration) time.Duration {
	return min(max(timeout, 30*time.Second), time.Hour)
}

// drainFirstLocked says whether the node is drained for the assigned
// change. If not, it starts the drain (RunDrains carries it out) unless
// one runs already, and the change waits: nothing is written meanwhile. A
// drain that failed a short while ago is not tried again yet: its early
// error is returned, for the caller to retry later.
func (n *Node) drainFirstLocked(recs *nodeconfigv1.Records, why string) (drained bool, _ *nodeconfigv1.Records, _ error) {
	a := recs.GetAssigned()
	if d := recs.GetDrain(); d != nil && records.SameSource(d.GetSource(), a.GetSource()) {
		return d.GetPhase() == nodeconfigv1.DrainPhase_DRAIN_PHASE_DRAINED, recs, nil
	}
	if n.drainer == nil {
		return false, recs, n.earlyErrorLocked(records.ReasonDrainFailed, fmt.Sprintf("%s needs a drain first (%s), and this agent cannot drain its node: it needs --node-name and access to the API server", describeExactly(a.GetSource()), why), nil)
	}
	timeout := drainTimeout(a)
	if e := recs.GetError(); e.GetError().GetPhase() == nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY && e.GetError().GetReason() == records.ReasonDrainFailed {
		if next := e.GetWrittenAt().AsTime().Add(drainRetryAfter(timeout)); n.store.Now().Before(next) {
			return false, recs, &WriteFailedError{Reason: records.ReasonDrainFailed, Message: e.GetError().GetMessage() + fmt.Sprintf("; the next drain starts at %s", next.UTC().Format(time.RFC3339))}
		}
	}
	recs, err := n.store.UpdateRecords(func(r *nodeconfigv1.Records, now *timestamppb.Timestamp) (bool, error) {
		next := &nodeconfigv1.DrainRecord{Source: a.GetSource(), Phase: nodeconfigv1.DrainPhase_DRAIN_PHASE_DRAINING, Since: now, TimeoutSeconds: int64(timeout / time.Second), Why: why}
		// A drain it replaces may have cordoned the node: that cordon is
		// this one's now, to lift when it ends.
		next.Cordoned = r.GetDrain().GetCordoned()
		r.Drain = next
		return true, nil
	})
	if err != nil {
		return false, nil, err
	}
	n.log.Info("draining the node before the change", "assigned", describeExactly(a.GetSource()), "why", why, "timeout", timeout)
	return false, recs, nil
}

// RunDrains carries out the node's drains until ctx ends, from its
// records, so that an agent that starts again resumes where the last one
// was: a drain under way (within the bound it began with), a drained node
// to uncordon once the kubelet is healthy, a drain whose change is no
// longer assigned to abandon. Without a Drainer it returns at once.
func (n *Node) RunDrains(ctx context.Context) {
	if n.drainer == nil {
		return
	}
	w, ok, err := n.store.Watch(0)
	if err != nil || !ok {
		n.log.Error("drains: cannot watch the records", "err", err)
		return
	}
	defer w.Stop()
	var running *runningDrain
	defer func() {
		if running != nil {
			running.cancel()
			<-running.done
		}
	}()
	recs := <-w.C
	for {
		running = n.stepDrain(ctx, recs, running)
		select {
		case <-ctx.Done():
			return
		case <-w.Done():
			return
		case recs = <-w.C:
		case <-time.After(5 * time.Second):
			// A lost call to the API server (an uncordon) is retried.
		}
	}
}

// runningDrain is a drain this agent carries out.
type runningDrain struct {
	record *nodeconfigv1.DrainRecord
	cancel context.CancelFunc
	done   chan struct{}
}

// stepDrain does what recs call for and returns the drain now running.
func (n *Node) stepDrain(ctx context.Context, recs *nodeconfigv1.Records, running *runningDrain) *runningDrain {
	d := recs.GetDrain()
	if running != nil {
		select {
		case <-running.done:
			running = nil
		default:
		}
	}
	if running != nil && (d.GetPhase() != nodeconfigv1.DrainPhase_DRAIN_PHASE_DRAINING || !records.SameSource(d.GetSource(), running.record.GetSource())) {
		// Its change is done with, or another drain replaced it.
		running.cancel()
		<-running.done
		running = nil
	}
	switch {
	case d == nil:
		return running
	case d.GetPhase() == nodeconfigv1.DrainPhase_DRAIN_PHASE_DRAINING && !records.SameSource(d.GetSource(), recs.GetAssigned().GetSource()):
		// Its change is no longer assigned (a new version, a reset).
		n.endDrain(ctx, d, "its change is no longer assigned", nil)
	case d.GetPhase() == nodeconfigv1.DrainPhase_DRAIN_PHASE_DRAINING:
		if running == nil {
			running = n.startDrain(ctx, d)
		}
	case d.GetPhase() == nodeconfigv1.DrainPhase_DRAIN_PHASE_DRAINED && n.kubeletSettled(recs, d):
		n.endDrain(ctx, d, "the kubelet is healthy on "+describeExactly(recs.GetActive().GetSource()), nil)
	}
	return running
}

// kubeletSettled says whether the change d drained the node for is done
// with: the kubelet runs the active config healthy, and that is d's change
// (restarted onto it after the drain), or what replaced it (a rollback, a
// newer version). A drained node takes pods again then. Without a consumer
// gate nothing is restarted, and the activation is enough.
func (n *Node) kubeletSettled(recs *nodeconfigv1.Records, d *nodeconfigv1.DrainRecord) bool {
	active := recs.GetActive().GetSource()
	moved := records.SameSource(active, d.GetSource()) || !records.SameSource(recs.GetAssigned().GetSource(), d.GetSource()) ||
		recs.GetError().GetError().GetPhase() == nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE
	if !moved || n.consumer == nil {
		return moved
	}
	c := recs.GetConsumer()
	return records.SameSource(c.GetSource(), active) && c.GetPhase() == nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY
}

// startDrain cordons the node and evicts its pods in the background,
// within the bound d began with.
func (n *Node) startDrain(ctx context.Context, d *nodeconfigv1.DrainRecord) *runningDrain {
	// Within the bound it began with, by the records' clock.
	left := d.GetSince().AsTime().Add(time.Duration(d.GetTimeoutSeconds()) * time.Second).Sub(n.store.Now())
	dctx, cancel := context.WithTimeout(ctx, left)
	r := &runningDrain{record: d, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		defer cancel()
		if left <= 0 {
			// An agent that starts again after the bound: the drain failed
			// while nothing watched it.
			n.drainFailed(ctx, d, fmt.Errorf("its bound of %ds passed while the agent was down", d.GetTimeoutSeconds()))
			return
		}
		err := n.drain(dctx, d)
		if ctx.Err() != nil || (err != nil && dctx.Err() == context.Canceled) {
			// The agent stops, or the drain was called off: the records
			// say what is left to do.
			return
		}
		if err != nil {
			n.drainFailed(ctx, d, err)
			return
		}
		n.drained(d)
	}()
	return r
}

// drain cordons the node (noting first that the cordon is the agent's, so
// that an agent that dies right after still lifts it) and evicts its pods.
func (n *Node) drain(ctx context.Context, d *nodeconfigv1.DrainRecord) error {
	if !d.GetCordoned() {
		cordoned, err := n.drainer.Cordoned(ctx)
		if err != nil {
			return err
		}
		if !cordoned {
			if ok, err := n.noteCordon(d); err != nil || !ok {
				return fmt.Errorf("the drain's record changed: %v", err)
			}
			if err := n.drainer.Cordon(ctx); err != nil {
				return err
			}
		}
	}
	return n.drainer.Evict(ctx)
}

// noteCordon records that the agent cordons the node for d.
func (n *Node) noteCordon(d *nodeconfigv1.DrainRecord) (bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ok := false
	_, err := n.store.UpdateRecords(func(r *nodeconfigv1.Records, _ *timestamppb.Timestamp) (bool, error) {
		if !proto.Equal(r.GetDrain(), d) {
			return false, nil
		}
		ok = true
		r.Drain.Cordoned = true
		return true, nil
	})
	return ok, err
}

// drained makes the change d drained for active, now that the node is
// empty: Activate goes on from where it stopped.
func (n *Node) drained(d *nodeconfigv1.DrainRecord) {
	n.mu.Lock()
	defer n.mu.Unlock()
	changed := false
	if _, err := n.store.UpdateRecords(func(r *nodeconfigv1.Records, _ *timestamppb.Timestamp) (bool, error) {
		cur := r.GetDrain()
		if !records.SameSource(cur.GetSource(), d.GetSource()) || cur.GetPhase() != nodeconfigv1.DrainPhase_DRAIN_PHASE_DRAINING {
			return false, nil
		}
		cur.Phase = nodeconfigv1.DrainPhase_DRAIN_PHASE_DRAINED
		changed = true
		return true, nil
	}); err != nil || !changed {
		return
	}
	n.log.Info("the node is drained: activating", "assigned", describeExactly(d.GetSource()))
	if _, _, err := n.activateLocked(); err != nil {
		// Recorded as the node's early error: the reconciler retries.
		n.log.Error("activate after the drain", "err", err)
	}
}

// drainFailed lifts the agent's cordon and records the failed drain as an
// early error naming the pods left, in the write that ends it (so that no
// Activate in between starts the next at once); the kubelet is not
// restarted.
func (n *Node) drainFailed(ctx context.Context, d *nodeconfigv1.DrainRecord, cause error) {
	retry := drainRetryAfter(time.Duration(d.GetTimeoutSeconds()) * time.Second)
	msg := fmt.Sprintf("%s needs a drain first (%s): %v; the node is uncordoned and its kubelet not restarted, and the drain is tried again in %s",
		describeExactly(d.GetSource()), d.GetWhy(), cause, retry)
	if n.endDrain(ctx, d, "it failed", &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY, Reason: records.ReasonDrainFailed, Message: msg}) {
		n.log.Warn("the drain failed; nothing rolled back, the reconciler retries", "reason", records.ReasonDrainFailed, "err", msg)
	}
}

// endDrain lifts the agent's cordon of d, if any, and drops the record,
// recording failure (nil: none) with it; false when the cordon could not
// be lifted (tried again later) or the record is another drain's by now.
// The lock is held across the uncordon: a drain that replaces d meanwhile
// would take over a cordon that is lifted under it.
func (n *Node) endDrain(ctx context.Context, d *nodeconfigv1.DrainRecord, why string, failure *nodeconfigv1.ConfigError) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	recs, err := n.store.Records()
	if err != nil {
		return false
	}
	cur := recs.GetDrain()
	if !records.SameSource(cur.GetSource(), d.GetSource()) || cur.GetPhase() != d.GetPhase() {
		return false
	}
	if cur.GetCordoned() {
		if err := n.drainer.Uncordon(ctx); err != nil {
			n.log.Error("drain: cannot uncordon the node; trying again", "err", err)
			return false
		}
	}
	if _, err := n.store.UpdateRecords(func(r *nodeconfigv1.Records, now *timestamppb.Timestamp) (bool, error) {
		r.Drain = nil
		if failure != nil && r.GetError().GetError().GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE {
			r.Error = &nodeconfigv1.ErrorRecord{Error: failure, WrittenAt: now}
		}
		return true, nil
	}); err != nil {
		n.log.Error("drain: cannot record its end", "err", err)
		return false
	}
	n.log.Info("drain over: the node takes pods again", "for", describeExactly(d.GetSource()), "why", why, "uncordoned", cur.GetCordoned())
	return true
}
