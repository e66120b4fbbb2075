package controller

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic/dynamicinformer"
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
	f.cacheNodeConfig(undecodable.DeepCopy())
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
	f.cacheNodeConfig(undecodable.DeepCopy())
	got := ReferencedConfigMaps(f.c.o.NodeConfigs)
	slices.SortFunc(got, func(x, y cmwatch.Ref) int { return strings.Compare(x.Namespace, y.Namespace) })
	want := []cmwatch.Ref{{Namespace: "ns", Name: "cfg"}, {Namespace: "other", Name: "kubelet"}}
	if !slices.Equal(got, want) {
		t.Errorf("referenced %v, want %v", got, want)
	}
}

// The NodeConfigs a sync reads are the cache's own objects, not copies: the
// same version twice is the same object, a new version a new one, and one
// deleted is gone.
func TestNodeConfigsAreDecodedOncePerVersion(t *testing.T) {
	f := newFixture(t)
	a := poolA("a", v1alpha1.Rollout{})
	f.setNodeConfig(a)
	f.setNodeConfig(poolA("b", v1alpha1.Rollout{}))
	first, err := f.c.nodeConfigs()
	if err != nil || len(first) != 2 {
		t.Fatalf("NodeConfigs %v, %v; want a and b", first, err)
	}
	again, _ := f.c.nodeConfigs()
	if again[0] != first[0] || again[1] != first[1] {
		t.Error("the same versions were decoded again")
	}

	a.Spec.SoakSeconds = 77
	f.setNodeConfig(a)
	changed, _ := f.c.nodeConfigs()
	if changed[0] == first[0] || changed[0].Spec.SoakSeconds != 77 || changed[0].ResourceVersion == first[0].ResourceVersion {
		t.Errorf("after a's new version got %+v, soak %d; want soak 77 at a version after %s", changed[0].ObjectMeta, changed[0].Spec.SoakSeconds, first[0].ResourceVersion)
	}
	if changed[1] != first[1] {
		t.Error("b, unchanged, was decoded again")
	}

	if err := f.ncs.Delete(&unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "a"}}}); err != nil {
		t.Fatal(err)
	}
	if left, _ := f.c.nodeConfigs(); len(left) != 1 || left[0].Name != "b" {
		t.Fatalf("after a's deletion: %v, want b alone", left)
	}
}

// The reconciler's NodeConfig informer lists typed NodeConfigs through its
// lister, and what does not decode as it came, skipped by the readers.
func TestNodeConfigInformerListsThemDecoded(t *testing.T) {
	f := newFixture(t)
	f.setNodeConfig(poolA("a", v1alpha1.Rollout{}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.dyn.Resource(v1alpha1.GroupVersionResource).Create(ctx, undecodable.DeepCopy(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(f.dyn, 0)
	informer, lister, err := NodeConfigInformer(factory)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	factory.Start(stop)
	defer func() { close(stop); factory.Shutdown() }()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("the NodeConfig informer never synced")
	}
	a, err := lister.Get("a")
	if nc, ok := a.(*v1alpha1.NodeConfig); err != nil || !ok || nc.Spec.Source.ConfigMap.Name != "cfg" {
		t.Fatalf("the lister's a: %T %v, %v; want NodeConfig a decoded", a, a, err)
	}
	if broken, err := lister.Get("broken"); err != nil || !isUnstructured(broken) {
		t.Errorf("the lister's undecodable NodeConfig: %T, %v; want it as it came", broken, err)
	}
	if refs := ReferencedConfigMaps(lister); !slices.Equal(refs, []cmwatch.Ref{{Namespace: "ns", Name: "cfg"}}) {
		t.Errorf("referenced %v through the informer's lister, want ns/cfg alone", refs)
	}

	// A new version through the watch is decoded too, and a deletion goes.
	updated := poolA("a", v1alpha1.Rollout{})
	updated.Spec.SoakSeconds = 77
	f.setNodeConfig(updated)
	if err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		obj, err := lister.Get("a")
		nc, ok := obj.(*v1alpha1.NodeConfig)
		return err == nil && ok && nc.Spec.SoakSeconds == 77, nil
	}); err != nil {
		t.Fatalf("a's new version never reached the lister decoded: %v", err)
	}
	if err := f.dyn.Resource(v1alpha1.GroupVersionResource).Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		_, err := lister.Get("a")
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("a's deletion never reached the lister: %v", err)
	}
}

func isUnstructured(obj any) bool {
	_, ok := obj.(*unstructured.Unstructured)
	return ok
}

// The informer's transform decodes a NodeConfig once and leaves alone what
// it cannot decode, so that a bad object stalls neither the informer nor
// the other NodeConfigs; reading that one says why.
func TestDecodeNodeConfigKeepsTheUndecodableAsItCame(t *testing.T) {
	f := newFixture(t)
	f.setNodeConfig(poolA("a", v1alpha1.Rollout{}))
	cached, _, _ := f.ncs.GetByKey("a")
	nc, ok := cached.(*v1alpha1.NodeConfig)
	if !ok || nc.Spec.Source.ConfigMap.Name != "cfg" {
		t.Fatalf("the cache holds %T %v, want NodeConfig a decoded", cached, cached)
	}
	if again, err := DecodeNodeConfig(nc); err != nil || again != any(nc) {
		t.Errorf("a decoded NodeConfig through the transform again: %v, %v; want it as it was", again, err)
	}
	kept, err := DecodeNodeConfig(undecodable)
	if err != nil || kept != any(undecodable) {
		t.Fatalf("the transform of an undecodable NodeConfig: %v, %v; want it kept as it came", kept, err)
	}
	if _, err := toNodeConfig(kept); err == nil || !strings.Contains(err.Error(), "NodeConfig broken") {
		t.Errorf("reading the undecodable NodeConfig: %v, want an error naming it", err)
	}
}

// The node syncs' workers read the NodeConfigs at once while they change.
func TestNodeConfigsAreReadConcurrently(t *testing.T) {
	f := newFixture(t)
	a := poolA("a", v1alpha1.Rollout{})
	f.setNodeConfig(a)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				if ncs, err := f.c.nodeConfigs(); err != nil || len(ncs) != 1 {
					t.Errorf("NodeConfigs %v, %v; want a alone", ncs, err)
					return
				}
			}
		})
	}
	for i := range 50 {
		a.Spec.SoakSeconds = int64(i)
		f.setNodeConfig(a)
	}
	wg.Wait()
	if ncs, _ := f.c.nodeConfigs(); ncs[0].Spec.SoakSeconds != 49 {
		t.Errorf("soak %d after the last version, want 49", ncs[0].Spec.SoakSeconds)
	}
}

// One node sync's look at 20 NodeConfigs, as a cluster with a NodeConfig
// per node pool has.
func BenchmarkNodeConfigs20(b *testing.B) {
	f := newFixture(b)
	for i := range 20 {
		f.setNodeConfig(poolA(fmt.Sprintf("pool-%02d", i), v1alpha1.Rollout{}))
	}
	b.ReportAllocs()
	for b.Loop() {
		if ncs, err := f.c.nodeConfigs(); err != nil || len(ncs) != 20 {
			b.Fatal(ncs, err)
		}
	}
}
