package server

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/intern"
)

// slim drops what the reconciler never reads from cached objects: their
// managed fields.
func slim(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// nodeTypeMeta names what a cached Node's metadata belongs to, as the
// metadata client gives it only as PartialObjectMetadata.
var nodeTypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}

// slimNode is the Node informer's transform: of a Node's metadata it keeps
// the identity, the labels (what selectors read), the abandoned mark, and
// of statusd's config status only the error (a change of it is the node's
// own rollback, which the controller acts on at once; nodes without an
// error keep nothing of it). The managed fields and the rest of the
// annotations are kilobytes per Node, times the fleet, and held for as
// long as the cache; the metadata informer already left out spec and
// status. Label keys and values most Nodes share (zone, architecture,
// pool) are kept once, through labels. Tombstones and other objects pass
// unchanged.
func slimNode(labels *intern.Strings) cache.TransformFunc {
	return func(obj any) (any, error) {
		n, ok := obj.(*metav1.PartialObjectMetadata)
		if !ok {
			return obj, nil
		}
		kept := &metav1.PartialObjectMetadata{TypeMeta: nodeTypeMeta, ObjectMeta: metav1.ObjectMeta{
			Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Generation: n.Generation,
			DeletionTimestamp: n.DeletionTimestamp,
		}}
		if n.Labels != nil {
			kept.Labels = make(map[string]string, len(n.Labels))
			for k, v := range n.Labels {
				kept.Labels[labels.Get(k)] = labels.Get(v)
			}
		}
		if v, ok := n.Annotations[v1alpha1.AnnotationAbandoned]; ok {
			kept.Annotations = map[string]string{v1alpha1.AnnotationAbandoned: v}
		}
		if e := reportedError(n.Annotations[v1alpha1.NodeAnnotationConfigStatus]); e != "" {
			if kept.Annotations == nil {
				kept.Annotations = make(map[string]string, 1)
			}
			kept.Annotations[v1alpha1.NodeAnnotationConfigStatus] = e
		}
		return kept, nil
	}
}

// reportedError is the config-status annotation cut to its error, in the
// annotation's own encoding ("" when there is none or it does not decode).
func reportedError(annotation string) string {
	// Every Node status update passes here; most nodes report no error, and
	// the codec leaves the key out then, so they cost no decode.
	if !strings.Contains(annotation, `"error"`) {
		return ""
	}
	st, err := v1alpha1.DecodeNodeConfigStatus(annotation)
	if err != nil || st.Error == "" {
		return ""
	}
	kept, err := v1alpha1.EncodeNodeConfigStatus(corev1.NodeConfigStatus{Error: st.Error})
	if err != nil {
		return ""
	}
	return kept
}

// nodeLabelStrings bounds the label keys and values kept once: above the
// distinct ones of a large fleet, whose Nodes' own names churn through it.
const nodeLabelStrings = 4096

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
