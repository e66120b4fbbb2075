// Package lifecycle applies the node-side rules of the config lifecycle to
// the store and the target file. Records change only after the target file
// is in place, and a late error rolls the node back to last-known-good by
// itself. Its errors are Go errors (errors.go and the store's); the gRPC
// adapter, internal/grpcapi, turns them into status codes.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/checkpointd/internal/guard"
	"nodeconfig.io/services/checkpointd/internal/kubeletfiles"
	"nodeconfig.io/services/checkpointd/internal/materialize"
	"nodeconfig.io/services/checkpointd/internal/store"
	"nodeconfig.io/services/configcheck"
	"nodeconfig.io/services/configcheck/fieldpolicy"
	"nodeconfig.io/services/configcheck/kubeletcheck"
)

// DefaultSoakSeconds is the soak of an assignment that sets none: that of a
// NodeConfig that sets none.
const DefaultSoakSeconds = v1alpha1.DefaultSoakSeconds

// Node is one node's config lifecycle: its store, the target file the
// active config is written to, and the consumer of that file.
type Node struct {
	store   *store.Store
	target  materialize.Target
	metrics *Metrics
	log     *slog.Logger
	// maxWatchers caps concurrent records watches (0 = no cap).
	maxWatchers int
	// consumer, when set, restarts the file's consumer after every change of
	// the file and gates the soak on its health.
	consumer Consumer
	// kubelet, when set, is where the node's kubelet reads its config: a
	// kubelet drop-in is judged merged with the node's own files.
	kubelet *kubeletcheck.NodeFiles
	// locate, when set, finds where the kubelet reads its files now:
	// target, kubelet and the guard's target follow it (kubeletfiles.go),
	// and are unknown until it first succeeds (located nil).
	locate  func() (kubeletfiles.Located, error)
	located *kubeletfiles.Located
	// filesMu guards target and kubelet for the readers that take no mu
	// (Preview, RunNodeFilesWatch): a locate moves them, under mu too.
	filesMu sync.RWMutex
	// guard, when set, is told of every trial (internal/guard).
	guard *guard.Writer
	// rules, when set, are the node's own field policy, checked at every
	// activation whatever the reconciler decided.
	rules *fieldpolicy.Rules
	// drainer, when set, drains the node before a change that needs it
	// (RunDrains); without it such a change is an early error.
	drainer Drainer

	// mu orders record changes with target writes, so the file on disk and
	// the active record never disagree for long.
	mu sync.Mutex

	// testHookBeforeAssign runs in Assign before the records change (tests:
	// a concurrent delete there).
	testHookBeforeAssign func()
	// testHookInRollBack runs in a rollback once the file holds
	// last-known-good, before active says so (tests: a kill there).
	testHookInRollBack func()
}

// Options configure a Node.
type Options struct {
	Store       *store.Store
	Target      materialize.Target
	Metrics     *Metrics
	Log         *slog.Logger
	MaxWatchers int
	Consumer    Consumer
	// Kubelet, when set, judges a kubelet drop-in merged with the node's
	// base config and its other drop-ins, as the kubelet merges them.
	Kubelet *kubeletcheck.NodeFiles
	// Locate, when set, finds where the kubelet reads its files, in place
	// of Target.Dir and Kubelet: the node follows it at start and before
	// each activation and drift repair.
	Locate func() (kubeletfiles.Located, error)
	// Guard, when set, is the host-side start guard's directory: the node
	// keeps its trial in step with the records and reads its fallback at
	// start.
	Guard *guard.Writer
	// Rules, when set, refuse at activation what the node's field policy
	// refuses (a late RefusedByPolicy error: nothing is written).
	Rules *fieldpolicy.Rules
	// Drainer, when set, drains the node before a change that needs one
	// (a kubelet field, or the NodeConfig's spec.rollout.drain).
	Drainer Drainer
}

// Consumer is the gate of the file's consumer (consumer.Gate): woken after
// every change of the file, which records it as RESTARTING.
type Consumer interface{ Wake() }

// New builds the node's lifecycle.
func New(o Options) *Node {
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Node{store: o.Store, target: o.Target, metrics: o.Metrics, log: o.Log, maxWatchers: o.MaxWatchers, consumer: o.Consumer, kubelet: o.Kubelet, guard: o.Guard, rules: o.Rules,
		locate: o.Locate, drainer: o.Drainer}
}

// Records returns the node's records.
func (n *Node) Records() (*nodeconfigv1.Records, error) { return n.store.Records() }

// Assignment is a config for the node to try, and how it is judged and
// soaked.
type Assignment struct {
	Source      *nodeconfigv1.ConfigSource
	SoakSeconds int64
	Validator   nodeconfigv1.Validator
	// NodeConfig names the NodeConfig that assigns it.
	NodeConfig string
	// Health names the trial's own health gates (nil: the default alone).
	Health *nodeconfigv1.HealthGates
	// Drain says when the node drains before the change (nil: only when a
	// changed field needs it).
	Drain *nodeconfigv1.DrainPolicy
}

// Assign records the config the node will try to use; it is refused
// unless its checkpoint is stored with its key. Assigning the same source
// with the same settings again changes nothing, so the soak clock, which
// starts at the record's write time, is never reset by a retry.
func (n *Node) Assign(a Assignment) (*nodeconfigv1.Records, error) {
	src := a.Source
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.testHookBeforeAssign != nil {
		n.testHookBeforeAssign()
	}
	var refusal error
	recs, err := n.store.UpdateRecordsWith(func(r *nodeconfigv1.Records, now *timestamppb.Timestamp, payloads store.Payloads) (bool, error) {
		// Checked in the transaction that records it: a DeletePayload or a
		// sweep cannot remove the payload between the check and the commit.
		switch found, hasKey, err := payloads.Has(src.GetUid(), src.GetResourceVersion(), src.GetKey()); {
		case err != nil:
			return false, err
		case !found:
			refusal = refusedf("no checkpoint for %s/%s: call PutCheckpoint first; assigned only ever names a config on disk", src.GetUid(), src.GetResourceVersion())
			return false, nil
		case !hasKey:
			refusal = refusedf("checkpoint %s/%s has no key %q", src.GetUid(), src.GetResourceVersion(), src.GetKey())
			return false, nil
		}
		prev := r.GetAssigned()
		if prev != nil && proto.Equal(prev.GetSource(), src) && prev.GetSoakSeconds() == a.SoakSeconds && prev.GetValidator() == a.Validator &&
			proto.Equal(prev.GetHealth(), a.Health) && proto.Equal(prev.GetDrain(), a.Drain) {
			return false, nil
		}
		r.Assigned = &nodeconfigv1.AssignedRecord{Source: src, SoakSeconds: a.SoakSeconds, Validator: a.Validator, WrittenAt: now, NodeConfig: a.NodeConfig, Health: a.Health, Drain: a.Drain}
		// The error (and the reset) belonged to what came before, unless
		// this version already failed late here: its mark stands.
		r.Error, r.LastReset = nil, nil
		if f := records.FailedLate(r, src, a.Validator); f != nil {
			r.Error = &nodeconfigv1.ErrorRecord{Error: f.GetError(), WrittenAt: now}
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if refusal != nil {
		return nil, refusal
	}
	return recs, nil
}

// Activate makes the assigned config active, or rolls back on a late error.
func (n *Node) Activate() (nodeconfigv1.ActivateOutcome, *nodeconfigv1.Records, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.activateLocked()
}

func (n *Node) activateLocked() (nodeconfigv1.ActivateOutcome, *nodeconfigv1.Records, error) {
	if err := n.followKubeletLocked(); err != nil {
		return 0, nil, err
	}
	recs, err := n.store.Records()
	if err != nil {
		return 0, nil, err
	}
	assigned := recs.GetAssigned()
	if assigned == nil {
		if _, err := n.ensureTarget(recs.GetActive().GetSource()); err != nil {
			return 0, nil, &TargetError{Err: err}
		}
		return nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_NOTHING_ASSIGNED, recs, nil
	}
	if f := records.FailedLate(recs, assigned.GetSource(), assigned.GetValidator()); f != nil {
		// Judged once already: a retry, a restart or a soak edit never
		// tries it again, and the node runs last-known-good meanwhile.
		if records.RollbackUnfinished(recs) {
			recs, err := n.rollBackLocked(f.GetError().GetReason(), f.GetError().GetMessage(), assigned.GetSource())
			if err != nil {
				return 0, nil, err
			}
			return nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ROLLED_BACK, recs, nil
		}
		recs, err := n.keepLateErrorLocked(f)
		if err != nil {
			return 0, nil, err
		}
		return nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ROLLED_BACK, recs, nil
	}
	content, reason, loadErr := n.load(assigned.GetSource(), assigned.GetValidator())
	if loadErr == nil && n.rules != nil {
		if err := n.rules.Admit(assigned.GetValidator(), content); err != nil {
			reason, loadErr = records.ReasonRefusedByPolicy, err
		}
	}
	if nodeFiles := (*kubeletcheck.NodeFilesError)(nil); errors.As(loadErr, &nodeFiles) {
		return 0, nil, n.earlyErrorLocked(records.ReasonNodeFilesUnreadable, fmt.Sprintf("cannot judge %s: the node's own kubelet files: %v", describeExactly(assigned.GetSource()), nodeFiles), nodeFiles)
	}
	if loadErr != nil {
		recs, err := n.rollBackLocked(reason, fmt.Sprintf("%s %s: %v", describeExactly(assigned.GetSource()), reasonVerb(reason), loadErr), assigned.GetSource())
		if err != nil {
			return 0, nil, err
		}
		return nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ROLLED_BACK, recs, nil
	}
	change := n.kubeletChangeTo(content)
	if !records.SameSource(recs.GetActive().GetSource(), assigned.GetSource()) {
		// What the change needs beyond a restart, judged before anything
		// is written: a refusal, or a drain first.
		plan, known := change.plan()
		if err := plan.RefusedError(); known && err != nil {
			recs, err := n.rollBackLocked(records.ReasonChangeRefused, fmt.Sprintf("%s was refused: %v", describeExactly(assigned.GetSource()), err), assigned.GetSource())
			if err != nil {
				return 0, nil, err
			}
			return nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ROLLED_BACK, recs, nil
		}
		if why := drainWhy(assigned, plan, known); why != "" {
			if drained, recs, err := n.drainFirstLocked(recs, why); err != nil || !drained {
				return nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_DRAINING, recs, err
			}
		}
	}
	if err := n.guardActivatingLocked(recs); err != nil {
		// No trial the guard does not know of: a kubelet that cannot start
		// on it would have nothing to bring it back.
		return 0, nil, n.writeFailedLocked(fmt.Sprintf("cannot tell the start guard of %s: %v", describeExactly(assigned.GetSource()), err), err)
	}
	same := n.sameForTheKubelet(recs, change)
	if err := n.target.Write(content); err != nil {
		// The trial never began: the guard counts none of its starts.
		n.syncGuardLocked()
		return 0, nil, n.writeFailedLocked(fmt.Sprintf("cannot write %s to %s: %v", describeExactly(assigned.GetSource()), n.target.Path(), err), err)
	}
	recs, err = n.store.UpdateRecords(func(r *nodeconfigv1.Records, now *timestamppb.Timestamp) (bool, error) {
		changed := false
		if !proto.Equal(r.GetActive().GetSource(), r.GetAssigned().GetSource()) {
			r.Active = &nodeconfigv1.SourceRecord{Source: r.GetAssigned().GetSource(), WrittenAt: now}
			if same {
				n.consumerUnchanged(r, now)
			} else {
				n.consumerStale(r, now, change.record())
			}
			changed = true
		}
		if r.Error != nil {
			r.Error = nil
			changed = true
		}
		return changed, nil
	})
	if err != nil {
		return 0, nil, err
	}
	n.syncGuardLocked()
	n.metrics.activations.Inc()
	n.wakeConsumer()
	return nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED, recs, nil
}

// writeFailedLocked records a failure to write the target as an early
// error, so that the node's status says why its config is not in place,
// and returns it as a *WriteFailedError.
func (n *Node) writeFailedLocked(message string, cause error) error {
	return n.earlyErrorLocked(records.ReasonWriteFailed, message, cause)
}

// earlyErrorLocked records a fault of the node (a file it cannot write or
// read) as an early error with reason and returns it as a
// *WriteFailedError: nothing rolls back, the caller retries. A late error
// stays: it is the verdict on the assigned version.
func (n *Node) earlyErrorLocked(reason, message string, cause error) error {
	e := &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY, Reason: reason, Message: message}
	if _, err := n.store.UpdateRecords(func(r *nodeconfigv1.Records, now *timestamppb.Timestamp) (bool, error) {
		if proto.Equal(r.GetError().GetError(), e) || r.GetError().GetError().GetPhase() == nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE {
			return false, nil
		}
		r.Error = &nodeconfigv1.ErrorRecord{Error: e, WrittenAt: now}
		return true, nil
	}); err != nil {
		n.log.Error("cannot record the early error", "err", err, "reason", reason, "early_error", message)
	}
	n.log.Warn("a fault of the node; nothing rolled back, the caller retries", "reason", reason, "err", message)
	return &WriteFailedError{Reason: reason, Message: message, Err: cause}
}

// rollBackLocked makes last-known-good active (nil: the local default, so
// the target file goes) and records a late error; when failed is the
// assigned config, its version is marked so that it is never activated
// again. When failed is last-known-good itself, the node falls back to its
// local default, and last-known-good is forgotten.
func (n *Node) rollBackLocked(reason, message string, failed *nodeconfigv1.ConfigSource) (*nodeconfigv1.Records, error) {
	recs, err := n.store.Records()
	if err != nil {
		return nil, err
	}
	fallback := recs.GetLastKnownGood()
	lkgFailed := failed != nil && proto.Equal(failed, fallback.GetSource())
	if lkgFailed {
		fallback = nil
		message += "; it was last-known-good, so the node fell back to its local default"
	}
	if a := recs.GetAssigned(); failed != nil && proto.Equal(a.GetSource(), failed) {
		// The verdict first: an agent killed before active says so
		// finishes the rollback at its start (Recover), instead of
		// restoring the failed version's file.
		verdict := &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE, Reason: reason, Message: message}
		if _, err := n.store.UpdateRecords(func(r *nodeconfigv1.Records, now *timestamppb.Timestamp) (bool, error) {
			r.Error = &nodeconfigv1.ErrorRecord{Error: verdict, WrittenAt: now}
			markFailed(r, &nodeconfigv1.FailedVersion{Source: failed, Validator: a.GetValidator(), Error: verdict, At: now})
			return true, nil
		}); err != nil {
			return nil, err
		}
	}
	content, err := n.content(fallback.GetSource())
	if err != nil {
		// Even last-known-good does not load: the local default is always good.
		n.log.Error("last-known-good does not load; falling back to the local default", "err", err)
		fallback, content = nil, nil
	}
	// The way back needs what the way there did, in reverse (a state
	// file written under the failed config).
	change := n.kubeletChangeTo(content)
	if _, err := n.target.Ensure(content); err != nil {
		// Nothing is recorded as rolled back until the file says so.
		return nil, n.writeFailedLocked(fmt.Sprintf("cannot roll back to %s at %s: %v", describeExactly(fallback.GetSource()), n.target.Path(), err), err)
	}
	if n.testHookInRollBack != nil {
		n.testHookInRollBack()
	}
	recs, err = n.store.UpdateRecords(func(r *nodeconfigv1.Records, now *timestamppb.Timestamp) (bool, error) {
		switched := !proto.Equal(r.GetActive().GetSource(), fallback.GetSource())
		if fallback == nil {
			r.Active = nil
		} else if switched {
			r.Active = &nodeconfigv1.SourceRecord{Source: fallback.GetSource(), WrittenAt: now}
		}
		if switched {
			n.consumerStale(r, now, change.record())
		}
		if lkgFailed {
			r.LastKnownGood = nil
		}
		e := &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE, Reason: reason, Message: message}
		r.Error = &nodeconfigv1.ErrorRecord{Error: e, WrittenAt: now}
		if a := r.GetAssigned(); failed != nil && proto.Equal(a.GetSource(), failed) {
			markFailed(r, &nodeconfigv1.FailedVersion{Source: failed, Validator: a.GetValidator(), Error: e, At: now})
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	n.syncGuardLocked()
	n.metrics.rollbacks.Inc()
	n.wakeConsumer()
	n.log.Warn("rolled back", "reason", reason, "message", message, "active", describeExactly(recs.GetActive().GetSource()))
	return recs, nil
}

// Promote makes the active assigned config last-known-good once its soak
// is over; it is refused otherwise.
func (n *Node) Promote(src *nodeconfigv1.ConfigSource) (*nodeconfigv1.Records, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	// A trial the guard fell back from ran last-known-good's file: its soak
	// proved nothing.
	n.guardFallbackLocked()
	var refusal error
	recs, err := n.store.UpdateRecords(func(r *nodeconfigv1.Records, now *timestamppb.Timestamp) (bool, error) {
		switch {
		case !proto.Equal(r.GetAssigned().GetSource(), src):
			refusal = fmt.Errorf("%s is not assigned (assigned: %s)", describeExactly(src), describeExactly(r.GetAssigned().GetSource()))
		case !proto.Equal(r.GetActive().GetSource(), src):
			refusal = fmt.Errorf("%s is not active (active: %s)", describeExactly(src), describeExactly(r.GetActive().GetSource()))
		case r.GetError().GetError().GetPhase() == nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE:
			refusal = fmt.Errorf("%s has a late error: %s", describeExactly(src), r.GetError().GetError().GetMessage())
		case proto.Equal(r.GetLastKnownGood().GetSource(), src):
		case records.SoakStart(r).IsZero():
			refusal = fmt.Errorf("%s has not begun its soak: the consumer is %s on it", describeExactly(src), consumerPhase(r))
		case now.AsTime().Before(records.SoakEnd(r)):
			// The soak is the node's own fact (from when the config became
			// active, or the consumer healthy on it), so the node enforces it
			// whoever asks.
			refusal = fmt.Errorf("%s is soaking until %s", describeExactly(src), records.SoakEnd(r).UTC().Format(time.RFC3339))
		}
		if refusal != nil || proto.Equal(r.GetLastKnownGood().GetSource(), src) {
			return false, nil
		}
		r.LastKnownGood = &nodeconfigv1.SourceRecord{Source: src, WrittenAt: now}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if refusal != nil {
		return nil, refusedf("cannot promote: %v", refusal)
	}
	n.syncGuardLocked()
	return recs, nil
}

// SetError records an early error, or clears the error (nil). A late
// error stays: it is the node's verdict on the assigned version, and only
// a new assignment replaces it.
func (n *Node) SetError(e *nodeconfigv1.ConfigError) (*nodeconfigv1.Records, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.store.UpdateRecords(func(r *nodeconfigv1.Records, now *timestamppb.Timestamp) (bool, error) {
		if proto.Equal(r.GetError().GetError(), e) || r.GetError().GetError().GetPhase() == nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE {
			return false, nil
		}
		if e == nil {
			r.Error = nil
		} else {
			r.Error = &nodeconfigv1.ErrorRecord{Error: e, WrittenAt: now}
		}
		return true, nil
	})
}

// Reset returns the node to its local default: every record becomes nil
// first, then the target file goes. A crash in between leaves records that
// say "local default" and a file that the start's drift repair removes;
// the other order would bring the old config back at start. The reset
// record keeps soakSeconds and the NodeConfig that asked, to pace the next
// departures.
func (n *Node) Reset(soakSeconds int64, nodeConfig string) (*nodeconfigv1.Records, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	change := n.kubeletChangeTo(nil)
	recs, err := n.store.UpdateRecords(func(r *nodeconfigv1.Records, now *timestamppb.Timestamp) (bool, error) {
		if r.Assigned == nil && r.Active == nil && r.LastKnownGood == nil && r.Error == nil {
			return false, nil
		}
		hadActive := r.Active != nil
		from := r.GetAssigned().GetSource()
		if from == nil {
			from = r.GetActive().GetSource()
		}
		r.LastReset = &nodeconfigv1.ResetRecord{From: from, At: now, SoakSeconds: soakSeconds, NodeConfig: nodeConfig}
		r.Assigned, r.Active, r.LastKnownGood, r.Error = nil, nil, nil, nil
		if hadActive {
			n.consumerStale(r, now, change.record())
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if n.target.Dir == "" {
		// No drop-in directory known: the kubelet reads none. One found
		// later is brought in line with the records by the next repair.
		n.log.Info("reset with no drop-in directory known: nothing to remove")
	} else if err := n.target.Remove(); err != nil {
		return nil, n.writeFailedLocked(fmt.Sprintf("cannot remove %s for the local default: %v", n.target.Path(), err), err)
	}
	// After the file goes: until then a start could meet it unguarded.
	n.syncGuardLocked()
	n.wakeConsumer()
	return recs, nil
}

// RepairDrift rewrites the target when it differs from the active payload,
// and reports whether it did.
func (n *Node) RepairDrift() (bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.repairLocked()
}

// Recover runs once at start, before serving: it re-materializes the active
// config (repairing drift), finishes an activation a crash interrupted, and
// falls back to last-known-good if the active config no longer loads.
func (n *Node) Recover() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.refreshStoreGauges()
	if err := n.followKubeletLocked(); err != nil {
		// Recorded on the node as an early error: serve, so that it is
		// seen, and follow the kubelet at the next activation or repair.
		n.log.Warn("cannot tell where the kubelet reads its files at start; serving, the reconciler retries", "err", err)
		return nil
	}
	n.target.CleanTemps()
	n.guardFallbackLocked()
	defer n.syncGuardLocked()
	recs, err := n.store.Records()
	if err != nil {
		return err
	}
	assigned := recs.GetAssigned()
	active := recs.GetActive().GetSource()
	switch {
	case records.RollbackUnfinished(recs):
		// A rollback a kill interrupted: its verdict is recorded, its
		// switch to last-known-good is not.
		failed := records.FailedLate(recs, assigned.GetSource(), assigned.GetValidator())
		_, err = n.rollBackLocked(failed.GetError().GetReason(), failed.GetError().GetMessage(), assigned.GetSource())
	case assigned != nil && !proto.Equal(assigned.GetSource(), active) &&
		recs.GetError().GetError().GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE:
		// Like the kubelet after a restart: try to make assigned active.
		_, _, err = n.activateLocked()
	default:
		_, err = n.repairLocked()
	}
	var writeFailed *WriteFailedError
	if errors.As(err, &writeFailed) {
		// Recorded on the node as an early error: serve, so that it is
		// seen and retried, rather than crash-loop on a full disk.
		n.log.Warn("could not write the target at start; serving, the reconciler retries", "err", err)
		return nil
	}
	return err
}

// repairLocked makes the target match the active record, or rolls back when
// the active payload no longer loads.
func (n *Node) repairLocked() (bool, error) {
	if err := n.followKubeletLocked(); err != nil {
		return false, err
	}
	// The guard's fallback is no drift: it is recorded, not written over;
	// and a trial the guard was not told of is told again.
	n.guardFallbackLocked()
	defer n.syncGuardLocked()
	recs, err := n.store.Records()
	if err != nil {
		return false, err
	}
	active := recs.GetActive().GetSource()
	content, err := n.content(active)
	if err != nil {
		if _, rbErr := n.rollBackLocked(configcheck.ReasonLoadFailed, fmt.Sprintf("active %s no longer loads: %v", describeExactly(active), err), active); rbErr != nil {
			return false, rbErr
		}
		return true, nil
	}
	// Failing to write is not failing to load: an early error, retried,
	// with nothing rolled back.
	changed, err := n.target.Ensure(content)
	if err != nil {
		return false, n.writeFailedLocked(fmt.Sprintf("cannot restore %s at %s: %v", describeExactly(active), n.target.Path(), err), err)
	}
	if err := n.clearWriteFailedLocked(); err != nil {
		return changed, err
	}
	if changed {
		n.metrics.driftRepairs.Inc()
		n.log.Warn("target file drifted from the active config; rewrote it", "target", n.target.Path(), "active", describeExactly(active))
		if n.consumer != nil {
			// The consumer may have read the drifted file: restart it onto the repaired one.
			if _, err := n.store.UpdateRecords(func(r *nodeconfigv1.Records, now *timestamppb.Timestamp) (bool, error) {
				// What the kubelet read of the drifted file is not known:
				// a restart, and what one still to come had to do.
				n.consumerStale(r, now, nil)
				return true, nil
			}); err != nil {
				return true, err
			}
			n.wakeConsumer()
		}
	}
	return changed, nil
}

// ensureTarget makes the target file hold src's payload (nil: no file).
func (n *Node) ensureTarget(src *nodeconfigv1.ConfigSource) (bool, error) {
	content, err := n.content(src)
	if err != nil {
		return false, err
	}
	return n.target.Ensure(content)
}

// content is src's payload as the target file holds it (nil: no file).
func (n *Node) content(src *nodeconfigv1.ConfigSource) ([]byte, error) {
	if src == nil {
		return nil, nil
	}
	content, _, err := n.load(src, nodeconfigv1.Validator_VALIDATOR_NONE)
	return content, err
}

// clearWriteFailedLocked drops a recorded early error of the node's own
// about its file (records.NodeClears: WriteFailed, KubeletNoConfigDir) once
// the target holds what it should.
func (n *Node) clearWriteFailedLocked() error {
	_, err := n.store.UpdateRecords(func(r *nodeconfigv1.Records, _ *timestamppb.Timestamp) (bool, error) {
		if e := r.GetError().GetError(); e.GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY || !records.NodeClears(e.GetReason()) {
			return false, nil
		}
		r.Error = nil
		return true, nil
	})
	return err
}

// load reads one key of a checkpoint and validates it. The reason says
// which late error a failure is.
func (n *Node) load(src *nodeconfigv1.ConfigSource, v nodeconfigv1.Validator) ([]byte, string, error) {
	p, err := n.store.GetPayload(src.GetUid(), src.GetResourceVersion())
	if err != nil {
		return nil, configcheck.ReasonLoadFailed, err
	}
	value, ok := p.Data[src.GetKey()]
	if !ok {
		return nil, configcheck.ReasonLoadFailed, fmt.Errorf("checkpoint has no key %q", src.GetKey())
	}
	if err := n.judge(v, []byte(value)); err != nil {
		return nil, configcheck.ReasonValidationFailed, err
	}
	return []byte(value), "", nil
}

// validators run the kubelet's validation in process: the agent links the
// kubelet's code anyway, to merge a drop-in with the node's files.
var validators = configcheck.Checker{Kubelet: kubeletcheck.Check}

// judge validates a payload as it would stand on this node: a kubelet
// drop-in merged with the node's own files where the node knows them.
func (n *Node) judge(v nodeconfigv1.Validator, payload []byte) error {
	return judgeOn(n.kubelet, v, payload)
}

// judgeOn judges a payload merged with the kubelet's files k (nil: alone).
func judgeOn(k *kubeletcheck.NodeFiles, v nodeconfigv1.Validator, payload []byte) error {
	if v != nodeconfigv1.Validator_VALIDATOR_KUBELET || k == nil {
		return validators.Payload(context.Background(), v, payload)
	}
	if _, err := k.Effective(context.Background(), payload); err != nil {
		return fmt.Errorf("invalid KubeletConfiguration merged with the node's files: %w", err)
	}
	return nil
}

// describeExactly names the config with its ConfigMap's uid: the node's own
// records must tell a ConfigMap from a later one recreated with its name.
func describeExactly(src *nodeconfigv1.ConfigSource) string {
	if src == nil {
		return "the local default"
	}
	return fmt.Sprintf("%s/%s key %s (uid %s, resourceVersion %s)", src.GetNamespace(), src.GetName(), src.GetKey(), src.GetUid(), src.GetResourceVersion())
}

func reasonVerb(reason string) string {
	switch reason {
	case configcheck.ReasonValidationFailed:
		return "failed validation"
	case records.ReasonRefusedByPolicy:
		return "was refused by this node's field policy"
	}
	return "failed to load"
}
