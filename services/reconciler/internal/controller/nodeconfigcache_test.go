package controller

import (
	"log/slog"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/cmwatch"
)

// undecodable is a cached NodeConfig whose spec is not one.
var undecodable = &unstructured.Unstructured{Object: map[string]any{
	"apiVersion": "nodeconfig.io/v1alpha1", "kind": "NodeConfig",
	"metadata": map[string]any{"name": "broken"}, "spec": "not an object",
}}

// The controller reads NodeConfigs by name; one it cannot decode is
// skipped, not an error for every other.
func TestNodeConfigsAreByNameWithoutTheUndecodable(t *testing.T) {
	f := newFixture(t)
	f.c.o.Log = slog.New(slog.DiscardHandler)
	f.setNodeConfig(poolA("b", v1alpha1.Rollout{}))
	f.setNodeConfig(poolA("a", v1alpha1.Rollout{}))
	if err := f.ncs.Add(undecodable); err != nil {
		t.Fatal(err)
	}
	ncs, err := f.c.nodeConfigs()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, nc := range ncs {
		names = append(names, nc.Name)
	}
	if !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("NodeConfigs %v, want a b", names)
	}
	u, _, _ := f.ncs.GetByKey("a")
	if nc, err := toNodeConfig(cache.DeletedFinalStateUnknown{Key: "a", Obj: u}); err != nil || nc.Name != "a" {
		t.Errorf("from a deletion tombstone: %v, %v; want NodeConfig a", nc, err)
	}
}

// The watched ConfigMaps are those the NodeConfigs name as their source.
func TestReferencedConfigMapsAreTheSources(t *testing.T) {
	f := newFixture(t)
	f.setNodeConfig(poolA("a", v1alpha1.Rollout{}))
	other := poolA("b", v1alpha1.Rollout{})
	other.Spec.Source.ConfigMap = &v1alpha1.ConfigMapSource{Namespace: "other", Name: "kubelet", Key: "k"}
	f.setNodeConfig(other)
	f.setNodeConfig(&v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "no-source"}})
	if err := f.ncs.Add(undecodable); err != nil {
		t.Fatal(err)
	}
	got := ReferencedConfigMaps(f.c.o.NodeConfigs)
	slices.SortFunc(got, func(x, y cmwatch.Ref) int { return strings.Compare(x.Namespace, y.Namespace) })
	want := []cmwatch.Ref{{Namespace: "ns", Name: "cfg"}, {Namespace: "other", Name: "kubelet"}}
	if !slices.Equal(got, want) {
		t.Errorf("referenced %v, want %v", got, want)
	}
}
