package nodesync

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDiffNoChangeNoPatch(t *testing.T) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"a": "1"}},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: "X", Status: corev1.ConditionTrue}}},
	}
	p, err := Diff(node, node.DeepCopy())
	if err != nil || p != nil {
		t.Fatalf("identical nodes gave a patch %s (err %v)", p, err)
	}
}

func TestDiffSendsOnlyWhatChanged(t *testing.T) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"theirs": "x", "ours": "old"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: "Theirs", Status: corev1.ConditionTrue},
			{Type: "Ours", Status: corev1.ConditionTrue},
			{Type: "Gone", Status: corev1.ConditionTrue},
		}},
	}
	desired := node.DeepCopy()
	desired.Annotations["ours"] = "new"
	desired.Status.Conditions[1].Status = corev1.ConditionFalse
	desired.Status.Conditions = desired.Status.Conditions[:2]
	p, err := Diff(node, desired)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(p), "Theirs") || !strings.Contains(string(p), `"Ours"`) || !strings.Contains(string(p), `"$patch":"delete"`) {
		t.Fatalf("patch %s", p)
	}
	var parsed struct {
		Metadata struct {
			Annotations map[string]any `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(p, &parsed); err != nil {
		t.Fatal(err)
	}
	if got := parsed.Metadata.Annotations; len(got) != 1 || got["ours"] != "new" {
		t.Fatalf("annotations in patch %s", p)
	}
}
