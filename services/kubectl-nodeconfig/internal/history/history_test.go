package history

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"nodeconfig.io/services/api/v1alpha1"
)

func revision(t *testing.T, owner types.UID, n int64, rv, payload string, started time.Time, outcome string) *appsv1.ControllerRevision {
	t.Helper()
	raw, err := json.Marshal(v1alpha1.NewRevisionData([]byte(payload), v1alpha1.RevisionSource{Namespace: "cfg", Name: "kubelet", UID: "cm", ResourceVersion: rv, Key: "config.yaml"}))
	if err != nil {
		t.Fatal(err)
	}
	return &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name: "workers-" + string(owner) + "-" + rv, Namespace: "nodeconfig-system",
			Labels:          map[string]string{v1alpha1.LabelHistoryOf: "workers"},
			Annotations:     map[string]string{v1alpha1.AnnotationRolloutStarted: started.Format(time.RFC3339Nano), v1alpha1.AnnotationRolloutOutcome: outcome},
			OwnerReferences: []metav1.OwnerReference{{Kind: "NodeConfig", Name: "workers", UID: owner}},
		},
		Data: runtime.RawExtension{Raw: raw}, Revision: n,
	}
}

// The history lists the NodeConfig's own revisions by number, marks the
// one whose rollout started last and the pinned one, and undo picks the
// one below the current one, or a kept one it is told, and refuses others.
func TestListAndUndoTarget(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	kube := fake.NewClientset(
		revision(t, "uid", 2, "200", "b: 2\n", t0.Add(time.Minute), v1alpha1.OutcomeSuperseded),
		revision(t, "uid", 1, "100", "a: 1\n", t0.Add(2*time.Minute), v1alpha1.OutcomeRollingOut),
		revision(t, "uid", 3, "300", "c: 3\n", t0.Add(90*time.Second), v1alpha1.OutcomeHalted),
		revision(t, "old-uid", 9, "900", "z: 9\n", t0, v1alpha1.OutcomePromoted),
	)
	nc := &v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "workers", UID: "uid"},
		Spec: v1alpha1.NodeConfigSpec{Source: &v1alpha1.Source{ConfigMap: &v1alpha1.ConfigMapSource{Namespace: "cfg", Name: "kubelet", Key: "config.yaml"}, Revision: ptr.To[int64](1)}}}
	revs, err := List(context.Background(), kube, "nodeconfig-system", nc)
	if err != nil {
		t.Fatal(err)
	}
	if len(revs) != 3 || revs[0].Revision != 1 || revs[2].Revision != 3 {
		t.Fatalf("revisions %+v: want 1, 2, 3 (not the earlier NodeConfig's 9)", revs)
	}
	if !revs[0].Current || !revs[0].Pinned || revs[1].Current || revs[2].Current {
		t.Fatalf("revision 1 should be current and pinned, alone: %+v", revs)
	}
	if revs[1].Source.ResourceVersion != "200" || len(revs[1].SHA256) != 64 {
		t.Fatalf("revision 2 reads %+v", revs[1])
	}

	var out strings.Builder
	if err := Text(&out, "workers", revs); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"REVISION  DIGEST", revs[1].SHA256[:12] + "  cfg/kubelet key config.yaml (resourceVersion 200)", "RollingOut (current) (pinned)", "Halted"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("history text lacks %q:\n%s", want, out.String())
		}
	}

	if _, err := UndoTarget("workers", revs, 0); err == nil || !strings.Contains(err.Error(), "no revision before its current one") {
		t.Errorf("undo from revision 1: %v, want a refusal", err)
	}
	if got, err := UndoTarget("workers", revs, 3); err != nil || got != 3 {
		t.Errorf("undo --to-revision 3: %d, %v", got, err)
	}
	if _, err := UndoTarget("workers", revs, 7); err == nil || !strings.Contains(err.Error(), "no revision 7 (kept: 1, 2, 3); nothing changed") {
		t.Errorf("undo --to-revision 7: %v, want a refusal naming the kept ones", err)
	}
	revs[0].Current, revs[2].Current = false, true
	if got, err := UndoTarget("workers", revs, 0); err != nil || got != 2 {
		t.Errorf("undo from revision 3: %d, %v, want 2", got, err)
	}
	if _, err := UndoTarget("workers", nil, 0); err == nil {
		t.Error("undo with no history: no error")
	}
}
