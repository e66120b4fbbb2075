package server

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeconfig.io/services/api/v1alpha1"
)

func TestSlimKeepsOfANodeWhatTheReconcilerReads(t *testing.T) {
	gone := metav1.Now()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1", ResourceVersion: "7", Labels: map[string]string{"pool": "a"},
			Annotations:       map[string]string{v1alpha1.AnnotationAbandoned: "nc-1", v1alpha1.NodeAnnotationConfigStatus: `{"big":"status"}`},
			DeletionTimestamp: &gone, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Spec:   corev1.NodeSpec{PodCIDR: "10.0.0.0/24", Taints: []corev1.Taint{{Key: "k"}}},
		Status: corev1.NodeStatus{Images: []corev1.ContainerImage{{Names: []string{"big"}}}},
	}
	out, err := slim(node)
	if err != nil {
		t.Fatal(err)
	}
	n := out.(*corev1.Node)
	want := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1", ResourceVersion: "7", Labels: map[string]string{"pool": "a"},
		Annotations: map[string]string{v1alpha1.AnnotationAbandoned: "nc-1"}, DeletionTimestamp: &gone}}
	if !equality.Semantic.DeepEqual(n, want) {
		t.Errorf("slim kept\n%+v\nwant\n%+v", n, want)
	}
	delete(node.Annotations, v1alpha1.AnnotationAbandoned)
	out, _ = slim(node)
	if a := out.(*corev1.Node).Annotations; a != nil {
		t.Errorf("a Node that is not abandoned kept annotations %v", a)
	}
}

func TestSlimDropsManagedFieldsOfOtherObjects(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Data: map[string]string{"k": "v"}}
	out, _ := slim(cm)
	if c := out.(*corev1.ConfigMap); c.ManagedFields != nil || c.Data["k"] != "v" {
		t.Errorf("slim of a ConfigMap: %+v", c)
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
