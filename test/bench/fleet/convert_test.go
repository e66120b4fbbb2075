package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// What a ValidatingAdmissionPolicy's match costs a kubelet-like Node's
// update on a 1.36 API server before any expression runs: it converts the
// Node and its old value to unstructured values for CEL, for each policy
// whose resource rules match (and again for its validations once its
// match conditions hold).
func BenchmarkKubeletLikeNodeToUnstructured(b *testing.B) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(4711), Labels: map[string]string{}}}
	kubeletLikeNode(node, 4711)
	for b.Loop() {
		if _, err := runtime.DefaultUnstructuredConverter.ToUnstructured(node); err != nil {
			b.Fatal(err)
		}
	}
}
