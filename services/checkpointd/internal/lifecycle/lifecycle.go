// Package lifecycle is checkpointd's gRPC service: it applies the node-side
// rules of the config lifecycle to the store and the target file. Records
// change only after the target file is in place, and a late error rolls the
// node back to last-known-good by itself.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/checkpointd/internal/materialize"
	"nodeconfig.io/services/checkpointd/internal/store"
	"nodeconfig.io/services/checkpointd/internal/validate"
	"nodeconfig.io/services/configcheck"
	"nodeconfig.io/services/configcheck/kubeletcheck"
)

// DefaultSoakSeconds is the seeds' 10-minute soak.
const DefaultSoakSeconds = 600

// Service implements nodeconfig.v1.CheckpointService.
type Service struct {
	nodeconfigv1.UnimplementedCheckpointServiceServer

	store   *store.Store
	target  materialize.Target
	metrics *Metrics
	log     *slog.Logger
	// maxWatchers caps concurrent WatchRecords streams (0 = no cap).
	maxWatchers int
	// consumer, when set, restarts the file's consumer after every change of
	// the file and gates the soak on its health.
	consumer Consumer
	// kubelet, when set, is where the node's kubelet reads its config: a
	// kubelet drop-in is judged merged with the node's own files.
	kubelet *kubeletcheck.Node

	// mu orders record changes with target writes, so the file on disk and
	// the active record never disagree for long.
	mu sync.Mutex

	// testHookBeforeAssign runs in SetAssigned after the request is checked
	// and before the records change (tests: a concurrent delete there).
	testHookBeforeAssign func()
}

// Options configure a Service.
type Options struct {
	Store       *store.Store
	Target      materialize.Target
	Metrics     *Metrics
	Log         *slog.Logger
	MaxWatchers int
	Consumer    Consumer
	// Kubelet, when set, judges a kubelet drop-in merged with the node's
	// base config and its other drop-ins, as the kubelet merges them.
	Kubelet *kubeletcheck.Node
}

// Consumer is the gate of the file's consumer (consumer.Gate): woken after
// every change of the file, which records it as RESTARTING.
type Consumer interface{ Wake() }

// New builds the service.
func New(o Options) *Service {
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Service{store: o.Store, target: o.Target, metrics: o.Metrics, log: o.Log, maxWatchers: o.MaxWatchers, consumer: o.Consumer, kubelet: o.Kubelet}
}

// PutCheckpoint stores a ConfigMap version.
func (s *Service) PutCheckpoint(_ context.Context, req *nodeconfigv1.PutCheckpointRequest) (*nodeconfigv1.PutCheckpointResponse, error) {
	src := req.GetSource()
	if src == nil {
		return nil, status.Error(codes.InvalidArgument, "source is required: pass the ConfigMap's namespace, name, uid and resource_version")
	}
	if err := errors.Join(validate.Version(src.GetUid(), src.GetResourceVersion()), validate.Data(req.GetData(), src.GetKey())); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	start := time.Now()
	p, created, err := s.store.PutPayload(store.Payload{
		Namespace: src.GetNamespace(), Name: src.GetName(),
		UID: src.GetUid(), ResourceVersion: src.GetResourceVersion(),
		Data: req.GetData(),
	})
	if err != nil {
		return nil, storeError(err)
	}
	if created {
		s.metrics.commitSeconds.Observe(time.Since(start).Seconds())
		s.metrics.checkpointsStored.Inc()
		s.metrics.checkpointBytes.Add(float64(p.SizeBytes))
	}
	return &nodeconfigv1.PutCheckpointResponse{Checkpoint: info(p), Created: created}, nil
}

// GetCheckpoint returns a stored payload.
func (s *Service) GetCheckpoint(_ context.Context, req *nodeconfigv1.GetCheckpointRequest) (*nodeconfigv1.GetCheckpointResponse, error) {
	if err := validate.Version(req.GetUid(), req.GetResourceVersion()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	p, err := s.store.GetPayload(req.GetUid(), req.GetResourceVersion())
	if err != nil {
		return nil, storeError(err)
	}
	return &nodeconfigv1.GetCheckpointResponse{Checkpoint: info(p), Data: p.Data}, nil
}

// ListCheckpoints lists stored payloads.
func (s *Service) ListCheckpoints(context.Context, *nodeconfigv1.ListCheckpointsRequest) (*nodeconfigv1.ListCheckpointsResponse, error) {
	ps, err := s.store.ListPayloads()
	if err != nil {
		return nil, storeError(err)
	}
	resp := &nodeconfigv1.ListCheckpointsResponse{}
	for _, p := range ps {
		resp.Checkpoints = append(resp.Checkpoints, info(p))
	}
	return resp, nil
}

// DeleteCheckpoint removes an unreferenced payload.
func (s *Service) DeleteCheckpoint(_ context.Context, req *nodeconfigv1.DeleteCheckpointRequest) (*nodeconfigv1.DeleteCheckpointResponse, error) {
	if err := validate.Version(req.GetUid(), req.GetResourceVersion()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := s.store.DeletePayload(req.GetUid(), req.GetResourceVersion()); err != nil {
		return nil, storeError(err)
	}
	s.refreshStoreGauges()
	return &nodeconfigv1.DeleteCheckpointResponse{}, nil
}

// GetRecords returns the records.
func (s *Service) GetRecords(context.Context, *nodeconfigv1.GetRecordsRequest) (*nodeconfigv1.GetRecordsResponse, error) {
	recs, err := s.store.Records()
	if err != nil {
		return nil, storeError(err)
	}
	return &nodeconfigv1.GetRecordsResponse{Records: recs}, nil
}

// SetAssigned records the config the node will try to use. Assigning the
// same source with the same settings again changes nothing, so the soak
// clock, which starts at the record's write time, is never reset by a retry.
func (s *Service) SetAssigned(_ context.Context, req *nodeconfigv1.SetAssignedRequest) (*nodeconfigv1.SetAssignedResponse, error) {
	src := req.GetSource()
	if err := validate.Source(src); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if req.GetSoakSeconds() < 0 {
		return nil, status.Error(codes.InvalidArgument, "soak_seconds must not be negative (0 means the default of 600)")
	}
	if _, ok := nodeconfigv1.Validator_name[int32(req.GetValidator())]; !ok {
		return nil, status.Errorf(codes.InvalidArgument, "unknown validator %d", req.GetValidator())
	}
	soak := req.GetSoakSeconds()
	if soak == 0 {
		soak = DefaultSoakSeconds
	}
	validator := req.GetValidator()
	if validator == nodeconfigv1.Validator_VALIDATOR_UNSPECIFIED {
		validator = nodeconfigv1.Validator_VALIDATOR_YAML
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.testHookBeforeAssign != nil {
		s.testHookBeforeAssign()
	}
	var refusal error
	recs, err := s.store.UpdateRecordsWith(func(r *nodeconfigv1.Records, now *timestamppb.Timestamp, payloads store.Payloads) (bool, error) {
		// Checked in the transaction that records it: a DeletePayload or a
		// sweep cannot remove the payload between the check and the commit.
		switch found, hasKey, err := payloads.Has(src.GetUid(), src.GetResourceVersion(), src.GetKey()); {
		case err != nil:
			return false, err
		case !found:
			refusal = status.Errorf(codes.FailedPrecondition, "no checkpoint for %s/%s: call PutCheckpoint first; assigned only ever names a config on disk", src.GetUid(), src.GetResourceVersion())
			return false, nil
		case !hasKey:
			refusal = status.Errorf(codes.FailedPrecondition, "checkpoint %s/%s has no key %q", src.GetUid(), src.GetResourceVersion(), src.GetKey())
			return false, nil
		}
		a := r.GetAssigned()
		if a != nil && proto.Equal(a.GetSource(), src) && a.GetSoakSeconds() == soak && a.GetValidator() == validator {
			return false, nil
		}
		r.Assigned = &nodeconfigv1.AssignedRecord{Source: src, SoakSeconds: soak, Validator: validator, WrittenAt: now, NodeConfig: req.GetNodeConfig()}
		// The error (and the reset) belonged to what came before.
		r.Error, r.LastReset = nil, nil
		return true, nil
	})
	if err != nil {
		return nil, storeError(err)
	}
	if refusal != nil {
		return nil, refusal
	}
	return &nodeconfigv1.SetAssignedResponse{Records: recs}, nil
}

// Activate makes the assigned config active, or rolls back on a late error.
func (s *Service) Activate(context.Context, *nodeconfigv1.ActivateRequest) (*nodeconfigv1.ActivateResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	outcome, recs, err := s.activateLocked()
	if err != nil {
		return nil, err
	}
	return &nodeconfigv1.ActivateResponse{Outcome: outcome, Records: recs}, nil
}

func (s *Service) activateLocked() (nodeconfigv1.ActivateOutcome, *nodeconfigv1.Records, error) {
	recs, err := s.store.Records()
	if err != nil {
		return 0, nil, storeError(err)
	}
	assigned := recs.GetAssigned()
	if assigned == nil {
		if _, err := s.ensureTarget(recs.GetActive().GetSource()); err != nil {
			return 0, nil, status.Error(codes.Internal, err.Error())
		}
		return nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_NOTHING_ASSIGNED, recs, nil
	}
	content, reason, loadErr := s.load(assigned.GetSource(), assigned.GetValidator())
	if loadErr != nil {
		recs, err := s.rollBackLocked(reason, fmt.Sprintf("%s %s: %v", describe(assigned.GetSource()), reasonVerb(reason), loadErr))
		if err != nil {
			return 0, nil, err
		}
		return nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ROLLED_BACK, recs, nil
	}
	if err := s.target.Write(content); err != nil {
		return 0, nil, s.writeFailedLocked(fmt.Sprintf("cannot write %s to %s: %v", describe(assigned.GetSource()), s.target.Path(), err), err)
	}
	recs, err = s.store.UpdateRecords(func(r *nodeconfigv1.Records, now *timestamppb.Timestamp) (bool, error) {
		changed := false
		if !proto.Equal(r.GetActive().GetSource(), r.GetAssigned().GetSource()) {
			r.Active = &nodeconfigv1.SourceRecord{Source: r.GetAssigned().GetSource(), WrittenAt: now}
			s.consumerStale(r, now)
			changed = true
		}
		if r.Error != nil {
			r.Error = nil
			changed = true
		}
		return changed, nil
	})
	if err != nil {
		return 0, nil, storeError(err)
	}
	s.metrics.activations.Inc()
	s.wakeConsumer()
	return nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED, recs, nil
}

// ReasonWriteFailed is the early error of a target file that cannot be
// written (read-only or full disk): nothing rolls back, the caller retries,
// and the next successful write clears it.
const ReasonWriteFailed = nodeconfigv1.ReasonWriteFailed

// writeFailedLocked records a failure to write the target as an early error,
// so that the node's status says why its config is not in place, and
// returns the gRPC error for the caller: ResourceExhausted for a full disk,
// FailedPrecondition otherwise, never Unavailable, which means the agent
// itself could not be reached.
func (s *Service) writeFailedLocked(message string, cause error) error {
	e := &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY, Reason: ReasonWriteFailed, Message: message}
	if _, err := s.store.UpdateRecords(func(r *nodeconfigv1.Records, now *timestamppb.Timestamp) (bool, error) {
		if proto.Equal(r.GetError().GetError(), e) {
			return false, nil
		}
		r.Error = &nodeconfigv1.ErrorRecord{Error: e, WrittenAt: now}
		return true, nil
	}); err != nil {
		s.log.Error("cannot record the write failure", "err", err, "write_error", message)
	}
	s.log.Warn("target write failed; nothing rolled back, the caller retries", "err", message)
	code := codes.FailedPrecondition
	if errors.Is(cause, syscall.ENOSPC) || errors.Is(cause, syscall.EDQUOT) || errors.Is(cause, syscall.EFBIG) {
		code = codes.ResourceExhausted
	}
	return &writeFailed{status.Newf(code, "%s (recorded as an early error %s; retry)", message, ReasonWriteFailed)}
}

// errWriteFailed matches the errors of writeFailedLocked.
var errWriteFailed = errors.New("target write failed")

type writeFailed struct{ st *status.Status }

func (e *writeFailed) Error() string              { return e.st.Err().Error() }
func (e *writeFailed) GRPCStatus() *status.Status { return e.st }
func (e *writeFailed) Is(target error) bool       { return target == errWriteFailed }

// rollBackLocked makes last-known-good active (nil: the local default, so
// the target file goes) and records a late error.
func (s *Service) rollBackLocked(reason, message string) (*nodeconfigv1.Records, error) {
	recs, err := s.store.Records()
	if err != nil {
		return nil, storeError(err)
	}
	fallback := recs.GetLastKnownGood()
	content, err := s.content(fallback.GetSource())
	if err != nil {
		// Even last-known-good does not load: the local default is always good.
		s.log.Error("last-known-good does not load; falling back to the local default", "err", err)
		fallback, content = nil, nil
	}
	if _, err := s.target.Ensure(content); err != nil {
		// Nothing is recorded as rolled back until the file says so.
		return nil, s.writeFailedLocked(fmt.Sprintf("cannot roll back to %s at %s: %v", describe(fallback.GetSource()), s.target.Path(), err), err)
	}
	recs, err = s.store.UpdateRecords(func(r *nodeconfigv1.Records, now *timestamppb.Timestamp) (bool, error) {
		switched := !proto.Equal(r.GetActive().GetSource(), fallback.GetSource())
		if fallback == nil {
			r.Active = nil
		} else if switched {
			r.Active = &nodeconfigv1.SourceRecord{Source: fallback.GetSource(), WrittenAt: now}
		}
		if switched {
			s.consumerStale(r, now)
		}
		r.Error = &nodeconfigv1.ErrorRecord{
			Error:     &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE, Reason: reason, Message: message},
			WrittenAt: now,
		}
		return true, nil
	})
	if err != nil {
		return nil, storeError(err)
	}
	s.metrics.rollbacks.Inc()
	s.wakeConsumer()
	s.log.Warn("rolled back", "reason", reason, "message", message, "active", describe(recs.GetActive().GetSource()))
	return recs, nil
}

// PromoteLastKnownGood makes the active assigned config last-known-good.
func (s *Service) PromoteLastKnownGood(_ context.Context, req *nodeconfigv1.PromoteLastKnownGoodRequest) (*nodeconfigv1.PromoteLastKnownGoodResponse, error) {
	src := req.GetSource()
	if err := validate.Source(src); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var refusal error
	recs, err := s.store.UpdateRecords(func(r *nodeconfigv1.Records, now *timestamppb.Timestamp) (bool, error) {
		switch {
		case !proto.Equal(r.GetAssigned().GetSource(), src):
			refusal = fmt.Errorf("%s is not assigned (assigned: %s)", describe(src), describe(r.GetAssigned().GetSource()))
		case !proto.Equal(r.GetActive().GetSource(), src):
			refusal = fmt.Errorf("%s is not active (active: %s)", describe(src), describe(r.GetActive().GetSource()))
		case r.GetError().GetError().GetPhase() == nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE:
			refusal = fmt.Errorf("%s has a late error: %s", describe(src), r.GetError().GetError().GetMessage())
		case proto.Equal(r.GetLastKnownGood().GetSource(), src):
		case r.SoakStart().IsZero():
			refusal = fmt.Errorf("%s has not begun its soak: the consumer is %s on it", describe(src), consumerPhase(r))
		case now.AsTime().Before(r.SoakEnd()):
			// The soak is the node's own fact (from when the config became
			// active, or the consumer healthy on it), so the node enforces it
			// whoever asks.
			refusal = fmt.Errorf("%s is soaking until %s", describe(src), r.SoakEnd().UTC().Format(time.RFC3339))
		}
		if refusal != nil || proto.Equal(r.GetLastKnownGood().GetSource(), src) {
			return false, nil
		}
		r.LastKnownGood = &nodeconfigv1.SourceRecord{Source: src, WrittenAt: now}
		return true, nil
	})
	if err != nil {
		return nil, storeError(err)
	}
	if refusal != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "cannot promote: %v", refusal)
	}
	return &nodeconfigv1.PromoteLastKnownGoodResponse{Records: recs}, nil
}

// SetError records an early error, or clears the error.
func (s *Service) SetError(_ context.Context, req *nodeconfigv1.SetErrorRequest) (*nodeconfigv1.SetErrorResponse, error) {
	e := req.GetError()
	if e != nil {
		if e.GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY {
			return nil, status.Error(codes.InvalidArgument, "only early errors may be set: late errors come from Activate, which also rolls back")
		}
		if err := validate.Reason(e.GetReason()); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		if e.GetMessage() == "" {
			return nil, status.Error(codes.InvalidArgument, "error.message is empty: say what went wrong")
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	recs, err := s.store.UpdateRecords(func(r *nodeconfigv1.Records, now *timestamppb.Timestamp) (bool, error) {
		if proto.Equal(r.GetError().GetError(), e) {
			return false, nil
		}
		if e == nil {
			r.Error = nil
		} else {
			r.Error = &nodeconfigv1.ErrorRecord{Error: e, WrittenAt: now}
		}
		return true, nil
	})
	if err != nil {
		return nil, storeError(err)
	}
	return &nodeconfigv1.SetErrorResponse{Records: recs}, nil
}

// Reset returns the node to its local default: every record becomes nil
// first, then the target file goes. A crash in between leaves records that
// say "local default" and a file that the start's drift repair removes;
// the other order would bring the old config back at start.
func (s *Service) Reset(_ context.Context, req *nodeconfigv1.ResetRequest) (*nodeconfigv1.ResetResponse, error) {
	if req.GetSoakSeconds() < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "soak_seconds %d: must not be negative", req.GetSoakSeconds())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	recs, err := s.store.UpdateRecords(func(r *nodeconfigv1.Records, now *timestamppb.Timestamp) (bool, error) {
		if r.Assigned == nil && r.Active == nil && r.LastKnownGood == nil && r.Error == nil {
			return false, nil
		}
		hadActive := r.Active != nil
		from := r.GetAssigned().GetSource()
		if from == nil {
			from = r.GetActive().GetSource()
		}
		r.LastReset = &nodeconfigv1.ResetRecord{From: from, At: now, SoakSeconds: req.GetSoakSeconds(), NodeConfig: req.GetNodeConfig()}
		r.Assigned, r.Active, r.LastKnownGood, r.Error = nil, nil, nil, nil
		if hadActive {
			s.consumerStale(r, now)
		}
		return true, nil
	})
	if err != nil {
		return nil, storeError(err)
	}
	if err := s.target.Remove(); err != nil {
		return nil, s.writeFailedLocked(fmt.Sprintf("cannot remove %s for the local default: %v", s.target.Path(), err), err)
	}
	s.wakeConsumer()
	return &nodeconfigv1.ResetResponse{Records: recs}, nil
}

// RepairDrift rewrites the target when it differs from the active payload.
func (s *Service) RepairDrift(context.Context, *nodeconfigv1.RepairDriftRequest) (*nodeconfigv1.RepairDriftResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	repaired, err := s.repairLocked()
	if err != nil {
		return nil, err
	}
	return &nodeconfigv1.RepairDriftResponse{Repaired: repaired}, nil
}

// Recover runs once at start, before serving: it re-materializes the active
// config (repairing drift), finishes an activation a crash interrupted, and
// falls back to last-known-good if the active config no longer loads.
func (s *Service) Recover() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.target.CleanTemps()
	s.refreshStoreGauges()
	recs, err := s.store.Records()
	if err != nil {
		return err
	}
	assigned := recs.GetAssigned()
	if assigned != nil && !proto.Equal(assigned.GetSource(), recs.GetActive().GetSource()) &&
		recs.GetError().GetError().GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE {
		// Like the kubelet after a restart: try to make assigned active.
		_, _, err = s.activateLocked()
	} else {
		_, err = s.repairLocked()
	}
	if errors.Is(err, errWriteFailed) {
		// Recorded on the node as an early error: serve, so that it is
		// seen and retried, rather than crash-loop on a full disk.
		s.log.Warn("could not write the target at start; serving, the reconciler retries", "err", err)
		return nil
	}
	return err
}

// repairLocked makes the target match the active record, or rolls back when
// the active payload no longer loads.
func (s *Service) repairLocked() (bool, error) {
	recs, err := s.store.Records()
	if err != nil {
		return false, storeError(err)
	}
	active := recs.GetActive().GetSource()
	content, err := s.content(active)
	if err != nil {
		if _, rbErr := s.rollBackLocked(configcheck.ReasonLoadFailed, fmt.Sprintf("active %s no longer loads: %v", describe(active), err)); rbErr != nil {
			return false, rbErr
		}
		return true, nil
	}
	// Failing to write is not failing to load: an early error, retried,
	// with nothing rolled back.
	changed, err := s.target.Ensure(content)
	if err != nil {
		return false, s.writeFailedLocked(fmt.Sprintf("cannot restore %s at %s: %v", describe(active), s.target.Path(), err), err)
	}
	if err := s.clearWriteFailedLocked(); err != nil {
		return changed, err
	}
	if changed {
		s.metrics.driftRepairs.Inc()
		s.log.Warn("target file drifted from the active config; rewrote it", "target", s.target.Path(), "active", describe(active))
		if s.consumer != nil {
			// The consumer may have read the drifted file: restart it onto the repaired one.
			if _, err := s.store.UpdateRecords(func(r *nodeconfigv1.Records, now *timestamppb.Timestamp) (bool, error) {
				s.consumerStale(r, now)
				return true, nil
			}); err != nil {
				return true, storeError(err)
			}
			s.wakeConsumer()
		}
	}
	return changed, nil
}

// ensureTarget makes the target file hold src's payload (nil: no file).
func (s *Service) ensureTarget(src *nodeconfigv1.ConfigSource) (bool, error) {
	content, err := s.content(src)
	if err != nil {
		return false, err
	}
	return s.target.Ensure(content)
}

// content is src's payload as the target file holds it (nil: no file).
func (s *Service) content(src *nodeconfigv1.ConfigSource) ([]byte, error) {
	if src == nil {
		return nil, nil
	}
	content, _, err := s.load(src, nodeconfigv1.Validator_VALIDATOR_NONE)
	return content, err
}

// clearWriteFailedLocked drops a recorded WriteFailed error once the target
// holds what it should.
func (s *Service) clearWriteFailedLocked() error {
	_, err := s.store.UpdateRecords(func(r *nodeconfigv1.Records, _ *timestamppb.Timestamp) (bool, error) {
		if e := r.GetError().GetError(); e.GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY || e.GetReason() != ReasonWriteFailed {
			return false, nil
		}
		r.Error = nil
		return true, nil
	})
	return storeErrorOrNil(err)
}

// load reads one key of a checkpoint and validates it. The reason says
// which late error a failure is.
func (s *Service) load(src *nodeconfigv1.ConfigSource, v nodeconfigv1.Validator) ([]byte, string, error) {
	p, err := s.store.GetPayload(src.GetUid(), src.GetResourceVersion())
	if err != nil {
		return nil, configcheck.ReasonLoadFailed, err
	}
	value, ok := p.Data[src.GetKey()]
	if !ok {
		return nil, configcheck.ReasonLoadFailed, fmt.Errorf("checkpoint has no key %q", src.GetKey())
	}
	if err := s.judge(v, []byte(value)); err != nil {
		return nil, configcheck.ReasonValidationFailed, err
	}
	return []byte(value), "", nil
}

// judge validates a payload as it would stand on this node: a kubelet
// drop-in merged with the node's own files where the node knows them.
func (s *Service) judge(v nodeconfigv1.Validator, payload []byte) error {
	if v != nodeconfigv1.Validator_VALIDATOR_KUBELET || s.kubelet == nil {
		return configcheck.Payload(v, payload)
	}
	if _, err := s.kubelet.Effective(context.Background(), payload); err != nil {
		return fmt.Errorf("invalid KubeletConfiguration merged with the node's files: %w", err)
	}
	return nil
}

// RunGC sweeps unreferenced payloads every interval until ctx ends.
func (s *Service) RunGC(ctx context.Context, interval, minAge time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n, err := s.store.SweepUnreferenced(minAge)
			if err != nil {
				s.log.Error("checkpoint sweep failed", "err", err)
				continue
			}
			s.metrics.sweeps.Inc()
			if n > 0 {
				s.log.Info("swept unreferenced checkpoints", "removed", n)
				s.refreshStoreGauges()
			}
		}
	}
}

func (s *Service) refreshStoreGauges() {
	ps, err := s.store.ListPayloads()
	if err != nil {
		return
	}
	var bytes int64
	for _, p := range ps {
		bytes += p.SizeBytes
	}
	s.metrics.checkpointsStored.Set(float64(len(ps)))
	s.metrics.checkpointBytes.Set(float64(bytes))
}

func info(p store.Payload) *nodeconfigv1.CheckpointInfo {
	return &nodeconfigv1.CheckpointInfo{
		Source:    &nodeconfigv1.ConfigSource{Namespace: p.Namespace, Name: p.Name, Uid: p.UID, ResourceVersion: p.ResourceVersion},
		Sha256:    p.SHA256,
		SizeBytes: p.SizeBytes,
		StoredAt:  timestamppb.New(p.StoredAt),
	}
}

func describe(src *nodeconfigv1.ConfigSource) string {
	if src == nil {
		return "the local default"
	}
	return fmt.Sprintf("%s/%s key %s (uid %s, resourceVersion %s)", src.GetNamespace(), src.GetName(), src.GetKey(), src.GetUid(), src.GetResourceVersion())
}

func reasonVerb(reason string) string {
	if reason == configcheck.ReasonValidationFailed {
		return "failed validation"
	}
	return "failed to load"
}

// ConsumerNode is the lifecycle as the consumer gate sees it.
type ConsumerNode struct{ *Service }

// Records returns the node's records.
func (c ConsumerNode) Records() (*nodeconfigv1.Records, error) { return c.store.Records() }

// SetConsumer records the consumer's phase on src while src is active.
func (c ConsumerNode) SetConsumer(src *nodeconfigv1.ConfigSource, phase nodeconfigv1.ConsumerPhase, message string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ok := false
	_, err := c.store.UpdateRecords(func(r *nodeconfigv1.Records, now *timestamppb.Timestamp) (bool, error) {
		if !proto.Equal(r.GetActive().GetSource(), src) {
			return false, nil
		}
		ok = true
		prev := r.GetConsumer()
		if proto.Equal(prev.GetSource(), src) && prev.GetPhase() == phase && prev.GetMessage() == message {
			return false, nil
		}
		r.Consumer = &nodeconfigv1.ConsumerRecord{Source: src, Phase: phase, Since: now, Message: message}
		return true, nil
	})
	return ok, storeErrorOrNil(err)
}

// RollBack makes last-known-good active because the consumer does not run
// src healthy: a late error, as a config that fails to load.
func (c ConsumerNode) RollBack(src *nodeconfigv1.ConfigSource, message string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	recs, err := c.store.Records()
	if err != nil {
		return false, storeError(err)
	}
	if src == nil || !proto.Equal(recs.GetActive().GetSource(), src) || proto.Equal(recs.GetLastKnownGood().GetSource(), src) {
		return false, nil
	}
	if _, err := c.rollBackLocked(ReasonConsumerUnhealthy, message); err != nil {
		return false, err
	}
	return true, nil
}

// ReasonConsumerUnhealthy is the late error of a config the consumer does
// not run healthy.
const ReasonConsumerUnhealthy = nodeconfigv1.ReasonConsumerUnhealthy

func storeErrorOrNil(err error) error {
	if err == nil {
		return nil
	}
	return storeError(err)
}

// consumerStale records, inside a records update that changes the file,
// that the consumer must be restarted onto the new active config.
func (s *Service) consumerStale(r *nodeconfigv1.Records, now *timestamppb.Timestamp) {
	if s.consumer == nil {
		return
	}
	var src *nodeconfigv1.ConfigSource
	if r.Active != nil {
		src = r.Active.GetSource()
	}
	r.Consumer = &nodeconfigv1.ConsumerRecord{Source: src, Phase: nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_RESTARTING, Since: now}
}

func (s *Service) wakeConsumer() {
	if s.consumer != nil {
		s.consumer.Wake()
	}
}

func consumerPhase(r *nodeconfigv1.Records) string {
	phase := strings.TrimPrefix(r.GetConsumer().GetPhase().String(), "CONSUMER_PHASE_")
	return strings.ToLower(phase)
}

func storeError(err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, store.ErrConflict):
		return status.Error(codes.AlreadyExists, err.Error()+"; a ConfigMap version never changes content, so this is a bug in the caller")
	case errors.Is(err, store.ErrReferenced):
		return status.Error(codes.FailedPrecondition, err.Error())
	default:
		return status.Errorf(codes.Internal, "store: %v", err)
	}
}
