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
	s, m, err := Diff(node, node.DeepCopy())
	if err != nil || s != nil || m != nil {
		t.Fatalf("identical nodes gave patches %s %s (err %v)", s, m, err)
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
	s, m, err := Diff(node, desired)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(s), "Theirs") || !strings.Contains(string(s), `"Ours"`) || !strings.Contains(string(s), `"$patch":"delete"`) {
		t.Fatalf("status patch %s", s)
	}
	var meta map[string]map[string]map[string]any
	if err := json.Unmarshal(m, &meta); err != nil {
		t.Fatal(err)
	}
	if got := meta["metadata"]["annotations"]; len(got) != 1 || got["ours"] != "new" {
		t.Fatalf("metadata patch %s", m)
	}
}
