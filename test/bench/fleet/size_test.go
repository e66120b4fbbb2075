package main

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A kubelet-like Node is as big as a real kubelet's (15-30 kB of JSON with
// its managed fields, which the API server adds and this leaves out).
func TestKubeletLikeNodeIsKubeletSized(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(4711), Labels: map[string]string{}}}
	kubeletLikeNode(node, 4711)
	j, err := json.Marshal(node)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d bytes of JSON", len(j))
	if len(j) < 12_000 || len(j) > 30_000 {
		t.Errorf("a kubelet-like Node is %d bytes of JSON; want 12-30 kB before its managed fields", len(j))
	}
	if len(node.Status.Images) != kubeletLikeImages || len(node.Status.Conditions) != 4 {
		t.Errorf("%d images, %d conditions; want %d and 4", len(node.Status.Images), len(node.Status.Conditions), kubeletLikeImages)
	}
}
