package nodeconfigs

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	nodeconfigfake "nodeconfig.io/services/api/client/clientset/fake"
	nodeconfigscheme "nodeconfig.io/services/api/client/clientset/scheme"
	"nodeconfig.io/services/api/v1alpha1"
)

// demo is a NodeConfig as the API server serves it, decoded by the typed
// client's codec.
func demo(t *testing.T) *v1alpha1.NodeConfig {
	t.Helper()
	const served = `{
		"apiVersion": "nodeconfig.io/v1alpha1", "kind": "NodeConfig",
		"metadata": {"name": "demo", "generation": 3},
		"spec": {
			"nodeSelector": {"matchLabels": {"pool": "a"}},
			"source": {"configMap": {"namespace": "ns", "name": "cm", "key": "k"}},
			"validator": "kubelet",
			"rollout": {"maxInTrial": "10%", "windows": [{"start": "22:00", "end": "04:00"}]}
		},
		"status": {
			"selected": 2, "active": 1, "waiting": 1,
			"conditions": [{"type": "Progressing", "status": "False", "reason": "Paused", "message": "m", "lastTransitionTime": "2026-03-01T12:00:00Z"}],
			"rolledBackVersions": [{"uid": "u", "resourceVersion": "7", "key": "k", "validator": "kubelet", "nodes": ["n1"]}]
		}
	}`
	obj, err := runtime.Decode(nodeconfigscheme.Codecs.UniversalDeserializer(), []byte(served))
	if err != nil {
		t.Fatal(err)
	}
	nc, ok := obj.(*v1alpha1.NodeConfig)
	if !ok {
		t.Fatalf("decoded a %T, want a NodeConfig", obj)
	}
	return nc
}

func TestDecodedAsServed(t *testing.T) {
	nc := demo(t)
	if ConfigMapOf(nc).Name != "cm" || nc.Spec.Rollout.MaxInTrial.String() != "10%" || nc.Status.Waiting != 1 {
		t.Fatalf("decoded: %+v", nc)
	}
	if c := Condition(nc, v1alpha1.ConditionProgressing); c == nil || c.Reason != v1alpha1.ReasonPaused {
		t.Fatalf("Progressing: %+v", c)
	}
	if Condition(nc, v1alpha1.ConditionReady) != nil {
		t.Fatal("Ready is not set")
	}
	if got := nc.Status.RolledBackVersions; len(got) != 1 || got[0].Nodes[0] != "n1" {
		t.Fatalf("rolledBackVersions: %+v", got)
	}
}

func TestSelects(t *testing.T) {
	nc := &v1alpha1.NodeConfig{Spec: v1alpha1.NodeConfigSpec{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}}}}
	if !Selects(nc, map[string]string{"pool": "a", "x": "y"}) || Selects(nc, map[string]string{"pool": "b"}) {
		t.Fatal("matchLabels")
	}
	if got := SelectorText(nc); got != "pool=a" {
		t.Fatalf("SelectorText = %q", got)
	}
	all := &v1alpha1.NodeConfig{Spec: v1alpha1.NodeConfigSpec{NodeSelector: &metav1.LabelSelector{}}}
	if !Selects(all, nil) || SelectorText(all) != "everything" {
		t.Fatal("{} selects every node")
	}
	invalid := &v1alpha1.NodeConfig{Spec: v1alpha1.NodeConfigSpec{NodeSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: metav1.LabelSelectorOpIn}}}}}
	if Selects(invalid, map[string]string{"pool": "a"}) {
		t.Fatal("an invalid selector selects nothing")
	}
	if Selects(&v1alpha1.NodeConfig{}, map[string]string{"pool": "a"}) {
		t.Fatal("no selector selects nothing")
	}
}

func TestSetPausedMergePatchesOnlyPaused(t *testing.T) {
	c := Client{NodeConfigs: nodeconfigfake.NewSimpleClientset(demo(t))}
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
