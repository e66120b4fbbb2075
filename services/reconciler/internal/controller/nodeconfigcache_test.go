package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	nodeconfiginformers "nodeconfig.io/services/api/client/informers"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/cmwatch"
)

// The controller reads NodeConfigs by name, also from a deletion
// tombstone.
func TestNodeConfigsAreByName(t *testing.T) {
	f := newFixture(t)
	f.setNodeConfig(poolA("b", v1alpha1.Rollout{}))
	f.setNodeConfig(poolA("a", v1alpha1.Rollout{}))
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

	if err := f.ncs.Delete(&v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "a"}}); err != nil {
		t.Fatal(err)
	}
	if left, _ := f.c.nodeConfigs(); len(left) != 1 || left[0].Name != "b" {
		t.Fatalf("after a's deletion: %v, want b alone", left)
	}
}

// The reconciler's NodeConfig informer lists typed NodeConfigs through its
// lister, and brings their new versions and deletions.
func TestNodeConfigInformerListsThemTyped(t *testing.T) {
	f := newFixture(t)
	f.setNodeConfig(poolA("a", v1alpha1.Rollout{}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	factory := nodeconfiginformers.NewSharedInformerFactory(f.api, 0)
	informer, lister := NodeConfigInformer(factory)
	stop := make(chan struct{})
	factory.Start(stop)
	defer func() { close(stop); factory.Shutdown() }()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("the NodeConfig informer never synced")
	}
	if nc, err := lister.Get("a"); err != nil || nc.Spec.Source.ConfigMap.Name != "cfg" {
		t.Fatalf("the lister's a: %v, %v; want NodeConfig a", nc, err)
	}
	if refs := ReferencedConfigMaps(lister); !slices.Equal(refs, []cmwatch.Ref{{Namespace: "ns", Name: "cfg"}}) {
		t.Errorf("referenced %v through the informer's lister, want ns/cfg alone", refs)
	}

	// A new version through the watch, and a deletion.
	updated := poolA("a", v1alpha1.Rollout{})
	updated.Spec.SoakSeconds = 77
	f.setNodeConfig(updated)
	if err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		nc, err := lister.Get("a")
		return err == nil && nc.Spec.SoakSeconds == 77, nil
	}); err != nil {
		t.Fatalf("a's new version never reached the lister: %v", err)
	}
	if err := f.api.NodeConfigV1alpha1().NodeConfigs().Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		_, err := lister.Get("a")
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("a's deletion never reached the lister: %v", err)
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
