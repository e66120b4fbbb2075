package server

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeconfig.io/services/api/v1alpha1"
)

// slim drops what the reconciler never reads from cached objects: managed
// fields, and of a Node all but what slimNode keeps.
func slim(obj any) (any, error) {
	if n, ok := obj.(*corev1.Node); ok {
		return slimNode(n), nil
	}
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// slimNode keeps of a Node its identity, its labels (what selectors read)
// and the abandoned mark. The rest (status, spec, the other annotations,
// statusd's config status among them) is kilobytes per Node, times the
// fleet, and held for as long as the cache.
func slimNode(n *corev1.Node) *corev1.Node {
	kept := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Generation: n.Generation,
		Labels: n.Labels, DeletionTimestamp: n.DeletionTimestamp,
	}}
	if v, ok := n.Annotations[v1alpha1.AnnotationAbandoned]; ok {
		kept.Annotations = map[string]string{v1alpha1.AnnotationAbandoned: v}
	}
	return kept
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
