package integration

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeconfig.io/test/framework/cluster"
)

// The API server no longer stores Node.spec.configSource or
// Node.status.config (Dynamic Kubelet Config was removed). This is why
// nodeconfig has its own CRD and a status annotation; if it ever changes,
// this test says so.
func TestAPIServerDropsDynamicKubeletConfigFields(t *testing.T) {
	ctx := context.Background()
	nodes := cluster.Shared.Client.CoreV1().Nodes()
	src := &corev1.NodeConfigSource{ConfigMap: &corev1.ConfigMapNodeConfigSource{
		Namespace: "kube-system", Name: "kubelet-config", KubeletConfigKey: "kubelet",
	}}
	node, err := nodes.Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "dkc-dropped"},
		Spec:       corev1.NodeSpec{ConfigSource: src},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nodes.Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })
	if node.Spec.ConfigSource != nil {
		t.Fatalf("spec.configSource was stored: %+v", node.Spec.ConfigSource)
	}
	node.Status.Config = &corev1.NodeConfigStatus{Assigned: src, Active: src}
	updated, err := nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if updated.Status.Config != nil {
		t.Fatalf("status.config was stored: %+v", updated.Status.Config)
	}
	got, err := nodes.Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.ConfigSource != nil || got.Status.Config != nil {
		t.Fatalf("read back configSource=%v config=%v, want both dropped", got.Spec.ConfigSource, got.Status.Config)
	}
}
