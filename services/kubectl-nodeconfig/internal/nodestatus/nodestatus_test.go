package nodestatus

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeconfig.io/services/api/v1alpha1"
)

func TestReadAnnotationAndCondition(t *testing.T) {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-0", Annotations: map[string]string{v1alpha1.NodeAnnotationConfigStatus: `{
			"assigned": {"configMap": {"namespace": "ns", "name": "cm", "uid": "u2", "resourceVersion": "20", "kubeletConfigKey": "k"}},
			"active": {"configMap": {"namespace": "ns", "name": "cm", "uid": "u1", "resourceVersion": "10", "kubeletConfigKey": "k"}},
			"error": "failed to validate: unknown field maxPodz"}`}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
			{Type: v1alpha1.NodeConditionConfigReady, Status: corev1.ConditionFalse, Reason: "RolledBack", Message: "late error"},
		}},
	}
	got := Read(n)
	if !got.Reported || got.Assigned.ResourceVersion != "20" || got.Active.ResourceVersion != "10" || got.LastKnownGood != nil {
		t.Fatalf("versions: %+v", got)
	}
	if got.Condition == nil || got.Condition.Reason != "RolledBack" || got.Condition.Status != "False" {
		t.Fatalf("condition: %+v", got.Condition)
	}
	if got.Error != "failed to validate: unknown field maxPodz" {
		t.Fatalf("error: %q", got.Error)
	}
}

func TestReadBeforeStatusdReports(t *testing.T) {
	got := Read(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}})
	if got.Reported || got.Condition != nil || got.Unreadable != "" {
		t.Fatalf("a node with nothing reported: %+v", got)
	}
	got = Read(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bad", Annotations: map[string]string{v1alpha1.NodeAnnotationConfigStatus: "{"}}})
	if got.Reported || !strings.Contains(got.Unreadable, v1alpha1.NodeAnnotationConfigStatus) {
		t.Fatalf("an unreadable annotation: %+v", got)
	}
}

func TestEveryReasonOfTheREADMEHasAMeaning(t *testing.T) {
	for _, r := range []string{"LocalDefault", "Soaking", "Active", "RolledBack", "ConsumerUnhealthy", "DownloadFailed",
		"CheckpointFailed", "WriteFailed", "KubeletNoConfigDir", "Activating", "Restarting", "WaitingForHealth", "CheckpointdUnavailable"} {
		if Meaning(r) == "" {
			t.Errorf("no meaning for %s", r)
		}
	}
}
