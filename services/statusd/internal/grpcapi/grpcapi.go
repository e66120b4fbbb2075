// Package grpcapi is statusd's gRPC adapter: external setters report
// through it, and operators read what statusd wants on the Node. It checks
// requests and maps them onto the domain packages (reports, nodesync,
// setters), which know nothing of gRPC.
package grpcapi

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/statusd/internal/nodesync"
	"nodeconfig.io/services/statusd/internal/reports"
	"nodeconfig.io/services/statusd/internal/setters"
)

// Service implements nodeconfig.v1.StatusService.
type Service struct {
	nodeconfigv1.UnimplementedStatusServiceServer

	NodeName string
	Reports  *reports.Store
	Syncer   *nodesync.Syncer
	Setters  func() []setters.Named
	Records  setters.RecordsFunc
}

var conditionStatus = map[nodeconfigv1.ConditionStatus]metav1.ConditionStatus{
	nodeconfigv1.ConditionStatus_CONDITION_STATUS_TRUE:    metav1.ConditionTrue,
	nodeconfigv1.ConditionStatus_CONDITION_STATUS_FALSE:   metav1.ConditionFalse,
	nodeconfigv1.ConditionStatus_CONDITION_STATUS_UNKNOWN: metav1.ConditionUnknown,
}

// Report stores a named setter output and syncs the Node soon.
func (s *Service) Report(_ context.Context, req *nodeconfigv1.ReportRequest) (*nodeconfigv1.ReportResponse, error) {
	conds := make([]metav1.Condition, 0, len(req.GetConditions()))
	for _, c := range req.GetConditions() {
		st, ok := conditionStatus[c.GetStatus()]
		if !ok {
			return nil, status.Errorf(codes.InvalidArgument, "condition %q: status must be TRUE, FALSE or UNKNOWN", c.GetType())
		}
		conds = append(conds, metav1.Condition{Type: c.GetType(), Status: st, Reason: c.GetReason(), Message: c.GetMessage()})
	}
	if err := s.Reports.Put(req.GetName(), conds, time.Now()); err != nil {
		if errors.Is(err, reports.ErrInvalid) {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		return nil, status.Error(codes.Internal, err.Error())
	}
	s.Syncer.Trigger()
	return &nodeconfigv1.ReportResponse{}, nil
}

// GetNodeStatus returns what statusd wants on its Node.
func (s *Service) GetNodeStatus(context.Context, *nodeconfigv1.GetNodeStatusRequest) (*nodeconfigv1.GetNodeStatusResponse, error) {
	st := s.Syncer.Snapshot()
	resp := &nodeconfigv1.GetNodeStatusResponse{
		NodeName:      s.NodeName,
		InSync:        st.InSync,
		PatchesSent:   st.PatchesSent,
		LastSyncError: st.LastError,
	}
	if recs, err := s.Records(); err == nil {
		resp.ConfigStatus = records.Status(recs)
	}
	if st.Desired != nil {
		for _, c := range st.Desired.Status.Conditions {
			resp.Conditions = append(resp.Conditions, toProto(c))
		}
	}
	return resp, nil
}

// ListSetters lists the setters in run order.
func (s *Service) ListSetters(context.Context, *nodeconfigv1.ListSettersRequest) (*nodeconfigv1.ListSettersResponse, error) {
	errs := s.Syncer.Snapshot().SetterErrors
	resp := &nodeconfigv1.ListSettersResponse{}
	for _, st := range s.Setters() {
		resp.Setters = append(resp.Setters, &nodeconfigv1.SetterInfo{Name: st.Name, Builtin: st.Builtin, LastError: errs[st.Name]})
	}
	return resp, nil
}

func toProto(c corev1.NodeCondition) *nodeconfigv1.Condition {
	st := nodeconfigv1.ConditionStatus_CONDITION_STATUS_UNSPECIFIED
	for k, v := range conditionStatus {
		if string(v) == string(c.Status) {
			st = k
		}
	}
	return &nodeconfigv1.Condition{
		Type: string(c.Type), Status: st, Reason: c.Reason, Message: c.Message,
		LastTransitionTime: timestamppb.New(c.LastTransitionTime.Time),
	}
}
