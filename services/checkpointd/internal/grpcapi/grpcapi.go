// Package grpcapi is checkpointd's gRPC adapter: it checks each request,
// hands it to the node's lifecycle, and maps the lifecycle's errors to the
// status codes the CheckpointService promises.
package grpcapi

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/checkpointd/internal/lifecycle"
	"nodeconfig.io/services/checkpointd/internal/store"
	"nodeconfig.io/services/checkpointd/internal/validate"
)

// Service implements nodeconfig.v1.CheckpointService on a node's lifecycle.
type Service struct {
	nodeconfigv1.UnimplementedCheckpointServiceServer

	node *lifecycle.Node
}

// New serves node.
func New(node *lifecycle.Node) *Service { return &Service{node: node} }

// PutCheckpoint stores a ConfigMap version.
func (s *Service) PutCheckpoint(_ context.Context, req *nodeconfigv1.PutCheckpointRequest) (*nodeconfigv1.PutCheckpointResponse, error) {
	src := req.GetSource()
	if src == nil {
		return nil, status.Error(codes.InvalidArgument, "source is required: pass the ConfigMap's namespace, name, uid and resource_version")
	}
	if err := errors.Join(validate.Version(src.GetUid(), src.GetResourceVersion()), validate.Data(req.GetData(), src.GetKey())); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	p, created, err := s.node.PutCheckpoint(src, req.GetData())
	if err != nil {
		return nil, grpcError(err)
	}
	return &nodeconfigv1.PutCheckpointResponse{Checkpoint: info(p), Created: created}, nil
}

// GetCheckpoint returns a stored payload.
func (s *Service) GetCheckpoint(_ context.Context, req *nodeconfigv1.GetCheckpointRequest) (*nodeconfigv1.GetCheckpointResponse, error) {
	if err := validate.Version(req.GetUid(), req.GetResourceVersion()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	p, err := s.node.Checkpoint(req.GetUid(), req.GetResourceVersion())
	if err != nil {
		return nil, grpcError(err)
	}
	return &nodeconfigv1.GetCheckpointResponse{Checkpoint: info(p), Data: p.Data}, nil
}

// ListCheckpoints lists stored payloads.
func (s *Service) ListCheckpoints(context.Context, *nodeconfigv1.ListCheckpointsRequest) (*nodeconfigv1.ListCheckpointsResponse, error) {
	ps, err := s.node.Checkpoints()
	if err != nil {
		return nil, grpcError(err)
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
	if err := s.node.DeleteCheckpoint(req.GetUid(), req.GetResourceVersion()); err != nil {
		return nil, grpcError(err)
	}
	return &nodeconfigv1.DeleteCheckpointResponse{}, nil
}

// GetRecords returns the records.
func (s *Service) GetRecords(context.Context, *nodeconfigv1.GetRecordsRequest) (*nodeconfigv1.GetRecordsResponse, error) {
	recs, err := s.node.Records()
	if err != nil {
		return nil, grpcError(err)
	}
	return &nodeconfigv1.GetRecordsResponse{Records: recs}, nil
}

// SetAssigned records the config the node will try to use. A zero soak or
// validator means the default: lifecycle.DefaultSoakSeconds, YAML.
func (s *Service) SetAssigned(_ context.Context, req *nodeconfigv1.SetAssignedRequest) (*nodeconfigv1.SetAssignedResponse, error) {
	if err := validate.Source(req.GetSource()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if req.GetSoakSeconds() < 0 {
		return nil, status.Error(codes.InvalidArgument, "soak_seconds must not be negative (0 means the default of 600)")
	}
	if _, ok := nodeconfigv1.Validator_name[int32(req.GetValidator())]; !ok {
		return nil, status.Errorf(codes.InvalidArgument, "unknown validator %d", req.GetValidator())
	}
	if req.GetDrain().GetTimeoutSeconds() < 0 {
		return nil, status.Error(codes.InvalidArgument, "drain.timeout_seconds must not be negative (0 means the default of 300)")
	}
	a := lifecycle.Assignment{Source: req.GetSource(), SoakSeconds: req.GetSoakSeconds(), Validator: req.GetValidator(), NodeConfig: req.GetNodeConfig(), Health: req.GetHealth(), Drain: req.GetDrain()}
	if a.SoakSeconds == 0 {
		a.SoakSeconds = lifecycle.DefaultSoakSeconds
	}
	if a.Validator == nodeconfigv1.Validator_VALIDATOR_UNSPECIFIED {
		a.Validator = nodeconfigv1.Validator_VALIDATOR_YAML
	}
	recs, err := s.node.Assign(a)
	if err != nil {
		return nil, grpcError(err)
	}
	return &nodeconfigv1.SetAssignedResponse{Records: recs}, nil
}

// Activate makes the assigned config active, or rolls back on a late error.
func (s *Service) Activate(context.Context, *nodeconfigv1.ActivateRequest) (*nodeconfigv1.ActivateResponse, error) {
	outcome, recs, err := s.node.Activate()
	if err != nil {
		return nil, grpcError(err)
	}
	return &nodeconfigv1.ActivateResponse{Outcome: outcome, Records: recs}, nil
}

// PromoteLastKnownGood makes the active assigned config last-known-good.
func (s *Service) PromoteLastKnownGood(_ context.Context, req *nodeconfigv1.PromoteLastKnownGoodRequest) (*nodeconfigv1.PromoteLastKnownGoodResponse, error) {
	if err := validate.Source(req.GetSource()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	recs, err := s.node.Promote(req.GetSource())
	if err != nil {
		return nil, grpcError(err)
	}
	return &nodeconfigv1.PromoteLastKnownGoodResponse{Records: recs}, nil
}

// SetError records an early error, or clears the error.
func (s *Service) SetError(_ context.Context, req *nodeconfigv1.SetErrorRequest) (*nodeconfigv1.SetErrorResponse, error) {
	if e := req.GetError(); e != nil {
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
	recs, err := s.node.SetError(req.GetError())
	if err != nil {
		return nil, grpcError(err)
	}
	return &nodeconfigv1.SetErrorResponse{Records: recs}, nil
}

// Reset returns the node to its local default.
func (s *Service) Reset(_ context.Context, req *nodeconfigv1.ResetRequest) (*nodeconfigv1.ResetResponse, error) {
	if req.GetSoakSeconds() < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "soak_seconds %d: must not be negative", req.GetSoakSeconds())
	}
	recs, err := s.node.Reset(req.GetSoakSeconds(), req.GetNodeConfig())
	if err != nil {
		return nil, grpcError(err)
	}
	return &nodeconfigv1.ResetResponse{Records: recs}, nil
}

// RepairDrift rewrites the target when it differs from the active payload.
func (s *Service) RepairDrift(context.Context, *nodeconfigv1.RepairDriftRequest) (*nodeconfigv1.RepairDriftResponse, error) {
	repaired, err := s.node.RepairDrift()
	if err != nil {
		return nil, grpcError(err)
	}
	return &nodeconfigv1.RepairDriftResponse{Repaired: repaired}, nil
}

// WatchRecords streams the current records, then every change.
func (s *Service) WatchRecords(_ *nodeconfigv1.WatchRecordsRequest, stream nodeconfigv1.CheckpointService_WatchRecordsServer) error {
	w, err := s.node.Watch()
	if err != nil {
		return grpcError(err)
	}
	defer w.Stop()
	for {
		select {
		case <-stream.Context().Done():
			// The caller's deadline or cancel ends the stream with its own
			// code, so a watch with a deadline never looks like a clean end.
			return status.FromContextError(stream.Context().Err()).Err()
		case <-w.Done():
			return status.Error(codes.Unavailable, "checkpointd is stopping")
		case recs := <-w.C:
			if err := stream.Send(&nodeconfigv1.WatchRecordsResponse{Records: recs}); err != nil {
				return err
			}
		}
	}
}

// PreviewConfig shows what the consumer would run with a payload in the
// place of the node's file, and whether activation would accept it.
func (s *Service) PreviewConfig(ctx context.Context, req *nodeconfigv1.PreviewConfigRequest) (*nodeconfigv1.PreviewConfigResponse, error) {
	p, err := s.node.Preview(ctx, req.GetPayload(), req.GetValidator())
	if err != nil {
		// The node's own files could not be read or rendered: no code
		// says more than Unknown.
		return nil, err
	}
	return &nodeconfigv1.PreviewConfigResponse{Files: p.Files, Current: p.Current, Candidate: p.Candidate, Refused: p.Refused, Merged: p.Merged}, nil
}

// grpcError maps an error of the lifecycle or the store to its status.
func grpcError(err error) error {
	var writeFailed *lifecycle.WriteFailedError
	var target *lifecycle.TargetError
	switch {
	case errors.As(err, &writeFailed):
		// Never Unavailable, which means the agent itself could not be
		// reached: the caller is to retry, not to fail over.
		code := codes.FailedPrecondition
		if writeFailed.NoSpace() {
			code = codes.ResourceExhausted
		}
		return status.Error(code, err.Error())
	case errors.As(err, &target):
		return status.Error(codes.Internal, err.Error())
	case errors.Is(err, lifecycle.ErrRefused):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, lifecycle.ErrTooManyWatchers):
		return status.Errorf(codes.ResourceExhausted, "%v; retry later", err)
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

func info(p store.Payload) *nodeconfigv1.CheckpointInfo {
	return &nodeconfigv1.CheckpointInfo{
		Source:    &nodeconfigv1.ConfigSource{Namespace: p.Namespace, Name: p.Name, Uid: p.UID, ResourceVersion: p.ResourceVersion},
		Sha256:    p.SHA256,
		SizeBytes: p.SizeBytes,
		StoredAt:  timestamppb.New(p.StoredAt),
	}
}
