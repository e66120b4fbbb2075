package server

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSlimDropsManagedFieldsAndNodeStatus(t *testing.T) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"pool": "a"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Status: corev1.NodeStatus{Images: []corev1.ContainerImage{{Names: []string{"big"}}}},
	}
	out, err := slim(node)
	if err != nil {
		t.Fatal(err)
	}
	n := out.(*corev1.Node)
	if n.ManagedFields != nil || len(n.Status.Images) != 0 {
		t.Errorf("slim kept managed fields %v or images %v", n.ManagedFields, n.Status.Images)
	}
	if n.Labels["pool"] != "a" {
		t.Errorf("slim dropped the labels the selectors read: %v", n.Labels)
	}
}

func TestAgentPodOnlyKeepsWhatFindingTheAgentNeeds(t *testing.T) {
	gone := metav1.Now()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-x", Namespace: "ns", Labels: map[string]string{"app": "agent"},
			Annotations: map[string]string{"big": "value"}, DeletionTimestamp: &gone},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "checkpointd"}}},
		Status: corev1.PodStatus{PodIP: "10.0.0.7", Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: corev1.ConditionFalse, Message: "probe failed"},
		}},
	}
	out, err := agentPodOnly(pod)
	if err != nil {
		t.Fatal(err)
	}
	p := out.(*corev1.Pod)
	if p.Spec.NodeName != "n1" || p.Status.PodIP != "10.0.0.7" || p.DeletionTimestamp == nil || p.Labels["app"] != "agent" {
		t.Errorf("lost what finding the agent needs: %+v", p)
	}
	want := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	if len(p.Status.Conditions) != 1 || p.Status.Conditions[0] != want[0] {
		t.Errorf("conditions %+v, want only readiness %+v", p.Status.Conditions, want)
	}
	if p.Annotations != nil || len(p.Spec.Containers) != 0 {
		t.Errorf("kept what the reconciler never reads: annotations %v, containers %v", p.Annotations, p.Spec.Containers)
	}
}
