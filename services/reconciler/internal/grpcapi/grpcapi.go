// Package grpcapi is the reconciler's gRPC adapter, the ReconcilerService for
// operators: each node's lifecycle state, error, backoff and next reconcile.
package grpcapi

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/reconciler/internal/controller"
)

// Nodes is the part of the controller the service reads.
type Nodes interface {
	NodeInfos() []controller.NodeInfo
	NodeInfo(name string) (controller.NodeInfo, bool)
	Resync(name string) (syncsStarted uint64)
	Preview(ctx context.Context, name string, candidate *nodeconfigv1.PreviewConfigRequest) (*controller.Preview, error)
}

// Service implements nodeconfig.v1.ReconcilerService.
type Service struct {
	nodeconfigv1.UnimplementedReconcilerServiceServer
	// Nodes returns the controller, or nil while this replica is not the leader.
	Nodes func() Nodes
}

func (s *Service) nodes() (Nodes, error) {
	n := s.Nodes()
	if n == nil {
		return nil, status.Error(codes.Unavailable, "this reconciler replica is not the leader; ask the leader (see the Lease nodeconfig-reconciler)")
	}
	return n, nil
}

// ListNodes lists every known node.
func (s *Service) ListNodes(context.Context, *nodeconfigv1.ListNodesRequest) (*nodeconfigv1.ListNodesResponse, error) {
	n, err := s.nodes()
	if err != nil {
		return nil, err
	}
	resp := &nodeconfigv1.ListNodesResponse{}
	for _, info := range n.NodeInfos() {
		resp.Nodes = append(resp.Nodes, toProto(info))
	}
	return resp, nil
}

// GetNode returns one node.
func (s *Service) GetNode(_ context.Context, req *nodeconfigv1.GetNodeRequest) (*nodeconfigv1.GetNodeResponse, error) {
	if req.GetNodeName() == "" {
		return nil, status.Error(codes.InvalidArgument, "node_name is required")
	}
	n, err := s.nodes()
	if err != nil {
		return nil, err
	}
	info, ok := n.NodeInfo(req.GetNodeName())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "node %q is not known to the reconciler (no such Node, or not synced yet)", req.GetNodeName())
	}
	return &nodeconfigv1.GetNodeResponse{Node: toProto(info)}, nil
}

// Resync reconciles a node now.
func (s *Service) Resync(_ context.Context, req *nodeconfigv1.ResyncRequest) (*nodeconfigv1.ResyncResponse, error) {
	if req.GetNodeName() == "" {
		return nil, status.Error(codes.InvalidArgument, "node_name is required")
	}
	n, err := s.nodes()
	if err != nil {
		return nil, err
	}
	return &nodeconfigv1.ResyncResponse{SyncsStarted: n.Resync(req.GetNodeName())}, nil
}

// PreviewNode shows what a node would run with its desired config, or
// with the request's candidate.
func (s *Service) PreviewNode(ctx context.Context, req *nodeconfigv1.PreviewNodeRequest) (*nodeconfigv1.PreviewNodeResponse, error) {
	if req.GetNodeName() == "" {
		return nil, status.Error(codes.InvalidArgument, "node_name is required")
	}
	n, err := s.nodes()
	if err != nil {
		return nil, err
	}
	p, err := n.Preview(ctx, req.GetNodeName(), req.GetCandidate())
	switch {
	case errors.Is(err, controller.ErrNoSuchNode):
		return nil, status.Error(codes.NotFound, err.Error())
	case errors.Is(err, controller.ErrCandidateTooLarge):
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &nodeconfigv1.PreviewNodeResponse{NodeConfig: p.NodeConfig, Source: p.Source, Payload: p.Payload, Preview: p.Node, Candidate: req.GetCandidate() != nil}, nil
}

func toProto(info controller.NodeInfo) *nodeconfigv1.NodeState {
	st := &nodeconfigv1.NodeState{
		NodeName:     info.Name,
		NodeConfig:   info.NodeConfig,
		State:        info.State,
		Error:        info.Err,
		Failures:     int32(info.Failures),
		Syncs:        info.Syncs,
		SyncsStarted: info.SyncsStarted,
	}
	if info.Records != nil {
		st.Status = records.Status(info.Records)
		if records.Soaking(info.Records) && !records.SoakEnd(info.Records).IsZero() {
			st.SoakEndsTime = timestamppb.New(records.SoakEnd(info.Records))
		}
	}
	if info.Backoff > 0 {
		st.Backoff = durationpb.New(info.Backoff)
	}
	if !info.NextReconcile.IsZero() {
		st.NextReconcileTime = timestamppb.New(info.NextReconcile)
	}
	return st
}
