package server

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"nodeconfig.io/services/api/v1alpha1"
)

// A NodeConfig's Events are recorded on the typed object, without TypeMeta
// as a watch decodes it: the recorder's scheme names it (Kind NodeConfig of
// nodeconfig.io/v1alpha1), and the Event goes to the API.
func TestNodeConfigEventsNameTheNodeConfig(t *testing.T) {
	kube := kubefake.NewClientset()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recorder, stop := eventRecorder(ctx, kube)
	defer stop()
	nc := &v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "pool-a", UID: "uid-a", ResourceVersion: "7"}}
	recorder.Event(nc, corev1.EventTypeWarning, v1alpha1.ReasonInvalidSelector, "spec.nodeSelector is invalid")

	var events []corev1.Event
	if err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list, err := kube.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		events = list.Items
		return len(events) > 0, nil
	}); err != nil {
		t.Fatalf("no Event reached the API: %v", err)
	}
	e := events[0]
	want := corev1.ObjectReference{Kind: "NodeConfig", APIVersion: "nodeconfig.io/v1alpha1", Name: "pool-a", UID: "uid-a", ResourceVersion: "7"}
	if len(events) != 1 || e.InvolvedObject != want || e.Type != corev1.EventTypeWarning || e.Reason != v1alpha1.ReasonInvalidSelector ||
		e.Message != "spec.nodeSelector is invalid" || e.Source.Component != "nodeconfig-reconciler" {
		t.Fatalf("Events %+v, want one Warning InvalidSelector on %+v from nodeconfig-reconciler", events, want)
	}
	if nc.Kind != "" || nc.APIVersion != "" {
		t.Errorf("recording changed the NodeConfig's TypeMeta to %+v: it is the cache's", nc.TypeMeta)
	}
}
