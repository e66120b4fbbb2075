package cmwatch

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// seen keeps the events the watcher hands on, as namespace/name.
type seen struct {
	mu             sync.Mutex
	added, deleted []string
}

func (s *seen) handler() cache.ResourceEventHandler {
	key := func(obj any) string {
		cm := obj.(*corev1.ConfigMap)
		return cm.Namespace + "/" + cm.Name
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.mu.Lock(); s.added = append(s.added, key(obj)); s.mu.Unlock() },
		DeleteFunc: func(obj any) { s.mu.Lock(); s.deleted = append(s.deleted, key(obj)); s.mu.Unlock() },
	}
}

func (s *seen) has(list *[]string, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(*list, key)
}

// Listed turns true only once the watch's first list is in the store, so a
// ConfigMap missing from the store then is missing from the cluster; the
// listing's event follows: Add for one found, Delete of the bare name for
// one not, which wakes whoever waited for it.
func TestListedOnceTheFirstListIsInTheStore(t *testing.T) {
	for _, exists := range []bool{true, false} {
		var objs []runtime.Object
		if exists {
			objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg"}, Data: map[string]string{"k": "v"}})
		}
		ev := &seen{}
		w := New(fake.NewClientset(objs...), ev.handler(), nil)
		if w.Listed("ns", "cfg") || w.HasSynced() {
			t.Fatalf("exists=%v: listed before any watch started", exists)
		}
		ctx, cancel := context.WithCancel(t.Context())
		w.Sync(ctx, []Ref{{Namespace: "ns", Name: "cfg"}})
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return w.Listed("ns", "cfg"), nil
		}); err != nil {
			cancel()
			t.Fatalf("exists=%v: never listed: %v", exists, err)
		}
		_, err := w.Lister().ConfigMaps("ns").Get("cfg")
		if exists && err != nil {
			t.Errorf("listed, but the store has no ConfigMap: %v", err)
		}
		if !exists && !apierrors.IsNotFound(err) {
			t.Errorf("listed with no ConfigMap in the cluster: Get says %v, want not found", err)
		}
		if !w.HasSynced() {
			t.Errorf("exists=%v: the ConfigMap is listed but the watcher has not synced", exists)
		}
		list := &ev.deleted
		if exists {
			list = &ev.added
		}
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return ev.has(list, "ns/cfg"), nil
		}); err != nil {
			t.Errorf("exists=%v: the listing's event never came (added %q, deleted %q)", exists, ev.added, ev.deleted)
		}
		if exists && ev.has(&ev.deleted, "ns/cfg") {
			t.Errorf("a ConfigMap that exists was told deleted")
		}
		cancel()
	}
}
