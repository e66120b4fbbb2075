package server

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// slim drops what the reconciler never reads from cached objects: managed
// fields, and on Nodes the image list and status (real Nodes carry
// kilobytes of them, times the fleet).
func slim(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	if n, ok := obj.(*corev1.Node); ok {
		n.Status = corev1.NodeStatus{}
	}
	return obj, nil
}

// agentPodOnly keeps of an agent Pod what finding its node's agent needs:
// its node, address, readiness and whether it is going away.
func agentPodOnly(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	slimPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
			Labels: pod.Labels, DeletionTimestamp: pod.DeletionTimestamp},
		Spec:   corev1.PodSpec{NodeName: pod.Spec.NodeName},
		Status: corev1.PodStatus{PodIP: pod.Status.PodIP},
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			slimPod.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return slimPod, nil
}
