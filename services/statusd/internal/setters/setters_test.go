package setters

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
)

func src(rv string) *nodeconfigv1.ConfigSource {
	return &nodeconfigv1.ConfigSource{Namespace: "ns", Name: "cm", Uid: "u", ResourceVersion: rv, Key: "k"}
}

func holding(r *nodeconfigv1.Records) RecordsFunc {
	return func() (*nodeconfigv1.Records, error) { return r, nil }
}

func TestReadyConditionOneReasonPerState(t *testing.T) {
	written := timestamppb.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	late := &nodeconfigv1.ErrorRecord{Error: &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE, Reason: "ValidationFailed", Message: "bad yaml at line 2"}}
	early := &nodeconfigv1.ErrorRecord{Error: &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY, Reason: "DownloadFailed", Message: "ConfigMap ns/cm not found"}}
	for _, tc := range []struct {
		name     string
		recs     RecordsFunc
		status   metav1.ConditionStatus
		reason   string
		contains string
	}{
		{"nothing assigned", holding(&nodeconfigv1.Records{}), metav1.ConditionTrue, v1alpha1.NodeReasonLocalDefault, "local default"},
		{"soaking", holding(&nodeconfigv1.Records{
			Assigned: &nodeconfigv1.AssignedRecord{Source: src("1"), SoakSeconds: 600, WrittenAt: written},
			Active:   &nodeconfigv1.SourceRecord{Source: src("1"), WrittenAt: written},
		}), metav1.ConditionTrue, v1alpha1.NodeReasonSoaking, "until 2026-01-01T00:10:00Z"},
		{"soaking from the consumer's healthy time", holding(&nodeconfigv1.Records{
			Assigned: &nodeconfigv1.AssignedRecord{Source: src("1"), SoakSeconds: 600, WrittenAt: written},
			Active:   &nodeconfigv1.SourceRecord{Source: src("1"), WrittenAt: written},
			Consumer: &nodeconfigv1.ConsumerRecord{Source: src("1"), Phase: nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY, Since: timestamppb.New(written.AsTime().Add(time.Minute))},
		}), metav1.ConditionTrue, v1alpha1.NodeReasonSoaking, "until 2026-01-01T00:11:00Z"},
		{"restarting the consumer", holding(&nodeconfigv1.Records{
			Assigned: &nodeconfigv1.AssignedRecord{Source: src("1"), SoakSeconds: 600, WrittenAt: written},
			Active:   &nodeconfigv1.SourceRecord{Source: src("1"), WrittenAt: written},
			Consumer: &nodeconfigv1.ConsumerRecord{Source: src("1"), Phase: nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_RESTARTING, Since: written},
		}), metav1.ConditionUnknown, v1alpha1.NodeReasonRestarting, "restarting the consumer"},
		{"waiting for the consumer's health", holding(&nodeconfigv1.Records{
			Assigned: &nodeconfigv1.AssignedRecord{Source: src("1"), SoakSeconds: 600, WrittenAt: written},
			Active:   &nodeconfigv1.SourceRecord{Source: src("1"), WrittenAt: written},
			Consumer: &nodeconfigv1.ConsumerRecord{Source: src("1"), Phase: nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING, Since: written},
		}), metav1.ConditionUnknown, v1alpha1.NodeReasonWaitingForHealth, "not healthy yet"},
		{"rolled back for the consumer", holding(&nodeconfigv1.Records{
			Assigned: &nodeconfigv1.AssignedRecord{Source: src("2")}, Active: &nodeconfigv1.SourceRecord{Source: src("1")},
			LastKnownGood: &nodeconfigv1.SourceRecord{Source: src("1")},
			Error:         &nodeconfigv1.ErrorRecord{Error: &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE, Reason: records.ReasonConsumerUnhealthy, Message: "connection refused"}},
		}), metav1.ConditionFalse, records.ReasonConsumerUnhealthy, "connection refused; rolled back to"},
		{"consumer unhealthy on last-known-good", holding(&nodeconfigv1.Records{
			Assigned: &nodeconfigv1.AssignedRecord{Source: src("1")}, Active: &nodeconfigv1.SourceRecord{Source: src("1")},
			LastKnownGood: &nodeconfigv1.SourceRecord{Source: src("1")},
			Consumer:      &nodeconfigv1.ConsumerRecord{Source: src("1"), Phase: nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_UNHEALTHY, Message: "healthz answered 500"},
		}), metav1.ConditionFalse, records.ReasonConsumerUnhealthy, "healthz answered 500; nothing better"},
		{"active", holding(&nodeconfigv1.Records{
			Assigned:      &nodeconfigv1.AssignedRecord{Source: src("1")},
			Active:        &nodeconfigv1.SourceRecord{Source: src("1")},
			LastKnownGood: &nodeconfigv1.SourceRecord{Source: src("1")},
		}), metav1.ConditionTrue, v1alpha1.NodeReasonActive, "last-known-good"},
		{"rolled back", holding(&nodeconfigv1.Records{
			Assigned: &nodeconfigv1.AssignedRecord{Source: src("2")}, Active: &nodeconfigv1.SourceRecord{Source: src("1")},
			LastKnownGood: &nodeconfigv1.SourceRecord{Source: src("1")}, Error: late,
		}), metav1.ConditionFalse, v1alpha1.NodeReasonRolledBack, "bad yaml at line 2"},
		{"early error", holding(&nodeconfigv1.Records{Error: early}), metav1.ConditionFalse, "DownloadFailed", "not found"},
		{"a kubelet without --config-dir", holding(&nodeconfigv1.Records{
			Assigned: &nodeconfigv1.AssignedRecord{Source: src("1")},
			Error: &nodeconfigv1.ErrorRecord{Error: &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY, Reason: records.ReasonKubeletNoConfigDir,
				Message: "the kubelet runs without --config-dir, so it reads no drop-in and the node writes none: add --config-dir=/etc/kubernetes/kubelet.conf.d to the kubelet's flags (KUBELET_EXTRA_ARGS) and restart it"}},
		}), metav1.ConditionFalse, records.ReasonKubeletNoConfigDir, "add --config-dir=/etc/kubernetes/kubelet.conf.d to the kubelet's flags (KUBELET_EXTRA_ARGS) and restart it; retrying, still using the local default"},
		{"activating", holding(&nodeconfigv1.Records{Assigned: &nodeconfigv1.AssignedRecord{Source: src("1")}}), metav1.ConditionUnknown, v1alpha1.NodeReasonActivating, "about to be activated"},
		{"draining", holding(&nodeconfigv1.Records{Assigned: &nodeconfigv1.AssignedRecord{Source: src("1")}, Drain: &nodeconfigv1.DrainRecord{
			Source: src("1"), Phase: nodeconfigv1.DrainPhase_DRAIN_PHASE_DRAINING, Since: timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), TimeoutSeconds: 60, Why: "the kubelet fields topologyManagerScope change",
		}}), metav1.ConditionUnknown, v1alpha1.NodeReasonDraining, "needs a drain first (the kubelet fields topologyManagerScope change): the node is cordoned and its pods evicted since 2026-01-02T03:04:05Z, for at most 60s"},
		{"checkpointd down", func() (*nodeconfigv1.Records, error) { return nil, errors.New("connection refused") }, metav1.ConditionUnknown, v1alpha1.NodeReasonCheckpointdUnavailable, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ReadyCondition(tc.recs)
			if c.Status != tc.status || c.Reason != tc.reason || c.Message == "" || !strings.Contains(c.Message, tc.contains) {
				t.Fatalf("got %s/%s %q, want %s/%s containing %q", c.Status, c.Reason, c.Message, tc.status, tc.reason, tc.contains)
			}
		})
	}
}

func TestConfigStatusAnnotationHasCoreShape(t *testing.T) {
	node := &corev1.Node{}
	recs := &nodeconfigv1.Records{
		Assigned: &nodeconfigv1.AssignedRecord{Source: src("2")}, Active: &nodeconfigv1.SourceRecord{Source: src("1")},
		Error: &nodeconfigv1.ErrorRecord{Error: &nodeconfigv1.ConfigError{Message: "boom"}},
	}
	if err := ConfigStatus(holding(recs))(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	var st corev1.NodeConfigStatus
	if err := json.Unmarshal([]byte(node.Annotations[v1alpha1.NodeAnnotationConfigStatus]), &st); err != nil {
		t.Fatal(err)
	}
	if st.Assigned.ConfigMap.ResourceVersion != "2" || st.Active.ConfigMap.KubeletConfigKey != "k" || st.LastKnownGood != nil || st.Error != "boom" {
		t.Fatalf("annotation = %s", node.Annotations[v1alpha1.NodeAnnotationConfigStatus])
	}
	// Unreachable checkpointd: the last reported status stays.
	before := node.Annotations[v1alpha1.NodeAnnotationConfigStatus]
	_ = ConfigStatus(func() (*nodeconfigv1.Records, error) { return nil, errors.New("down") })(context.Background(), node)
	if node.Annotations[v1alpha1.NodeAnnotationConfigStatus] != before {
		t.Fatal("annotation changed while checkpointd was unreachable")
	}
}

func TestSetConditionMovesTransitionTimeOnlyOnStatusChange(t *testing.T) {
	old := metav1.NewTime(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC))
	node := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: "Other", Status: corev1.ConditionTrue, Reason: "Theirs"},
		{Type: v1alpha1.NodeConditionConfigReady, Status: corev1.ConditionTrue, Reason: v1alpha1.NodeReasonSoaking, Message: "a", LastTransitionTime: old},
	}}}
	SetCondition(node, metav1.Condition{Type: v1alpha1.NodeConditionConfigReady, Status: metav1.ConditionTrue, Reason: v1alpha1.NodeReasonActive, Message: "b"})
	if c := node.Status.Conditions[1]; !c.LastTransitionTime.Equal(&old) || c.Reason != v1alpha1.NodeReasonActive {
		t.Fatalf("same status moved the transition time or lost the reason: %+v", c)
	}
	SetCondition(node, metav1.Condition{Type: v1alpha1.NodeConditionConfigReady, Status: metav1.ConditionFalse, Reason: v1alpha1.NodeReasonRolledBack, Message: "c"})
	c := node.Status.Conditions[1]
	if c.LastTransitionTime.Equal(&old) || c.LastHeartbeatTime.IsZero() {
		t.Fatalf("status change kept the old transition time or has no change time: %+v", c)
	}
	before := c.LastHeartbeatTime
	SetCondition(node, metav1.Condition{Type: v1alpha1.NodeConditionConfigReady, Status: metav1.ConditionFalse, Reason: v1alpha1.NodeReasonRolledBack, Message: "c"})
	if c := node.Status.Conditions[1]; !c.LastHeartbeatTime.Equal(&before) {
		t.Fatalf("an unchanged condition moved its lastHeartbeatTime (a heartbeat write): %+v", c)
	}
	if node.Status.Conditions[0].Reason != "Theirs" || len(node.Status.Conditions) != 2 {
		t.Fatalf("another component's condition was touched: %+v", node.Status.Conditions)
	}
}

func TestReportedSetterAppliesAndRemovesDroppedTypes(t *testing.T) {
	node := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: "GPUHealthy", Status: corev1.ConditionTrue}}}}
	set := Reported(func() ([]metav1.Condition, []string) {
		return []metav1.Condition{{Type: "KernelOK", Status: metav1.ConditionTrue, Reason: "Checked", Message: "m"}}, []string{"GPUHealthy"}
	})
	if err := set(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	if len(node.Status.Conditions) != 1 || node.Status.Conditions[0].Type != "KernelOK" {
		t.Fatalf("conditions = %+v", node.Status.Conditions)
	}
}
