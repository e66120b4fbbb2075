package nodeconfigs

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

func demo() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nodeconfig.io/v1alpha1", "kind": "NodeConfig",
		"metadata": map[string]any{"name": "demo", "generation": int64(3)},
		"spec": map[string]any{
			"nodeSelector": map[string]any{"matchLabels": map[string]any{"pool": "a"}},
			"source":       map[string]any{"configMap": map[string]any{"namespace": "ns", "name": "cm", "key": "k"}},
			"validator":    "kubelet",
			"rollout":      map[string]any{"maxInTrial": "10%", "windows": []any{map[string]any{"start": "22:00", "end": "04:00"}}},
		},
		"status": map[string]any{
			"selected": int64(2), "active": int64(1), "waiting": int64(1),
			"conditions":         []any{map[string]any{"type": "Progressing", "status": "False", "reason": "Paused", "message": "m", "lastTransitionTime": "2026-03-01T12:00:00Z"}},
			"rolledBackVersions": []any{map[string]any{"uid": "u", "resourceVersion": "7", "key": "k", "validator": "kubelet", "nodes": []any{"n1"}}},
		},
	}}
}

func TestFromObject(t *testing.T) {
	nc, err := FromObject(demo().Object)
	if err != nil {
		t.Fatal(err)
	}
	if ConfigMapOf(nc).Name != "cm" || nc.Spec.Rollout.MaxInTrial.String() != "10%" || nc.Status.Waiting != 1 {
		t.Fatalf("decoded: %+v", nc)
	}
	if c := Condition(nc, ConditionProgressing); c == nil || c.Reason != ReasonPaused {
		t.Fatalf("Progressing: %+v", c)
	}
	if Condition(nc, ConditionReady) != nil {
		t.Fatal("Ready is not set")
	}
	if got := nc.Status.RolledBackVersions; len(got) != 1 || got[0].Nodes[0] != "n1" {
		t.Fatalf("rolledBackVersions: %+v", got)
	}
}

func TestSelects(t *testing.T) {
	nc := &NodeConfig{Spec: Spec{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}}}}
	if !Selects(nc, map[string]string{"pool": "a", "x": "y"}) || Selects(nc, map[string]string{"pool": "b"}) {
		t.Fatal("matchLabels")
	}
	if got := SelectorText(nc); got != "pool=a" {
		t.Fatalf("SelectorText = %q", got)
	}
	all := &NodeConfig{Spec: Spec{NodeSelector: &metav1.LabelSelector{}}}
	if !Selects(all, nil) || SelectorText(all) != "everything" {
		t.Fatal("{} selects every node")
	}
	invalid := &NodeConfig{Spec: Spec{NodeSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: metav1.LabelSelectorOpIn}}}}}
	if Selects(invalid, map[string]string{"pool": "a"}) {
		t.Fatal("an invalid selector selects nothing")
	}
	if Selects(&NodeConfig{}, map[string]string{"pool": "a"}) {
		t.Fatal("no selector selects nothing")
	}
}

func TestSetPausedMergePatchesOnlyPaused(t *testing.T) {
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{GVR: "NodeConfigList"}, demo())
	c := Client{Dynamic: dyn}
	nc, err := c.SetPaused(context.Background(), "demo", true)
	if err != nil {
		t.Fatal(err)
	}
	if !nc.Spec.Rollout.Paused || nc.Spec.Rollout.MaxInTrial.String() != "10%" || len(nc.Spec.Rollout.Windows) != 1 {
		t.Fatalf("after pause: %+v", nc.Spec.Rollout)
	}
	nc, err = c.SetPaused(context.Background(), "demo", false)
	if err != nil || nc.Spec.Rollout.Paused {
		t.Fatalf("after resume: %+v, %v", nc.Spec.Rollout, err)
	}
	list, err := c.List(context.Background())
	if err != nil || len(list) != 1 || list[0].Name != "demo" {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if _, err := c.SetPaused(context.Background(), "missing", true); err == nil {
		t.Fatal("pausing a missing NodeConfig must fail")
	}
}
