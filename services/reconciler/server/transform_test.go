package server

import (
	"strings"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/intern"
)

func TestSlimNodeKeepsOfANodeWhatTheReconcilerReads(t *testing.T) {
	gone := metav1.Now()
	// What the metadata informer hands over: a Node's metadata, named as
	// PartialObjectMetadata.
	node := &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
		ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1", ResourceVersion: "7", Generation: 2, Labels: map[string]string{"pool": "a"},
			Annotations:       map[string]string{v1alpha1.AnnotationAbandoned: "nc-1", v1alpha1.NodeAnnotationConfigStatus: `{"big":"status"}`},
			DeletionTimestamp: &gone, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}},
			Finalizers: []string{"f"}, OwnerReferences: []metav1.OwnerReference{{Name: "o"}}},
	}
	slimNode := slimNode(intern.New(16))
	out, err := slimNode(node)
	if err != nil {
		t.Fatal(err)
	}
	n := out.(*metav1.PartialObjectMetadata)
	want := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1", ResourceVersion: "7", Generation: 2, Labels: map[string]string{"pool": "a"},
			Annotations: map[string]string{v1alpha1.AnnotationAbandoned: "nc-1"}, DeletionTimestamp: &gone}}
	if !equality.Semantic.DeepEqual(n, want) {
		t.Errorf("slimNode kept\n%+v\nwant\n%+v", n, want)
	}
	delete(node.Annotations, v1alpha1.AnnotationAbandoned)
	out, _ = slimNode(node)
	if a := out.(*metav1.PartialObjectMetadata).Annotations; a != nil {
		t.Errorf("a Node that is not abandoned kept annotations %v", a)
	}
	// A tombstone is the informer's, not a Node: it passes as it is.
	tomb := cache.DeletedFinalStateUnknown{Key: "n1", Obj: n}
	if out, _ := slimNode(tomb); out != any(tomb) {
		t.Errorf("slimNode changed a tombstone into %+v", out)
	}
}

// Two Nodes' equal label keys and values are kept once.
func TestSlimNodeKeepsSharedLabelsOnce(t *testing.T) {
	slimNode := slimNode(intern.New(16))
	node := func(name string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{strings.Repeat("zone", 2): strings.Repeat("a", 3)}}}
	}
	a, _ := slimNode(node("n1"))
	b, _ := slimNode(node("n2"))
	key := func(o any) string {
		for k := range o.(*metav1.PartialObjectMetadata).Labels {
			return k
		}
		return ""
	}
	la, lb := a.(*metav1.PartialObjectMetadata).Labels, b.(*metav1.PartialObjectMetadata).Labels
	if unsafe.StringData(key(a)) != unsafe.StringData(key(b)) || unsafe.StringData(la["zonezone"]) != unsafe.StringData(lb["zonezone"]) {
		t.Error("two Nodes' equal label key and value are kept twice")
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

// A node's own rollback shows in the error of its config-status annotation:
// the cache keeps that error (and only it), so that the controller sees the
// change at once, not at the node's next sync.
func TestSlimNodeKeepsTheNodesReportedError(t *testing.T) {
	slimNode := slimNode(intern.New(16))
	status := func(errMsg string) string {
		s, err := v1alpha1.EncodeNodeConfigStatus(corev1.NodeConfigStatus{
			Assigned: &corev1.NodeConfigSource{ConfigMap: &corev1.ConfigMapNodeConfigSource{Namespace: "ns", Name: "cm", KubeletConfigKey: "k", ResourceVersion: "2"}},
			Error:    errMsg,
		})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	reported := func(annotation string) string {
		out, err := slimNode(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "n1",
			Annotations: map[string]string{v1alpha1.NodeAnnotationConfigStatus: annotation}}})
		if err != nil {
			t.Fatal(err)
		}
		kept, ok := out.(*metav1.PartialObjectMetadata).Annotations[v1alpha1.NodeAnnotationConfigStatus]
		if !ok {
			return ""
		}
		st, err := v1alpha1.DecodeNodeConfigStatus(kept)
		if err != nil {
			t.Fatalf("kept %q: %v", kept, err)
		}
		if st.Assigned != nil {
			t.Errorf("kept %q: more than the error", kept)
		}
		return st.Error
	}
	if got := reported(status("rolled back: the kubelet did not become healthy")); got != "rolled back: the kubelet did not become healthy" {
		t.Errorf("kept error %q; want the node's", got)
	}
	if got := reported(status("")); got != "" {
		t.Errorf("kept error %q; want none", got)
	}
}
