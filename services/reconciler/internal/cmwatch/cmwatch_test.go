package cmwatch

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

var ref = Ref{Namespace: "ns", Name: "cfg"}

// seen keeps the events the watcher hands on, as namespace/name; an Add
// waits for release when one is set.
type seen struct {
	mu             sync.Mutex
	added, deleted []string
	release        chan struct{}
}

func (s *seen) handler() cache.ResourceEventHandler {
	key := func(obj any) string {
		cm := obj.(*corev1.ConfigMap)
		return cm.Namespace + "/" + cm.Name
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if s.release != nil {
				<-s.release
			}
			s.mu.Lock()
			s.added = append(s.added, key(obj))
			s.mu.Unlock()
		},
		DeleteFunc: func(obj any) { s.mu.Lock(); s.deleted = append(s.deleted, key(obj)); s.mu.Unlock() },
	}
}

func (s *seen) has(list *[]string, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(*list, key)
}

// eventually polls cond for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Listed turns true only once the watch's first list is in the store and
// handed on, not when the informer has merely read it: a ConfigMap missing
// from the store then is missing from the cluster. The listing's event
// follows: Add for one found, Delete of the bare name for one not, which
// wakes whoever waited for it.
func TestListedOnceTheFirstListIsInTheStore(t *testing.T) {
	for _, exists := range []bool{true, false} {
		var objs []runtime.Object
		if exists {
			objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg"}, Data: map[string]string{"k": "v"}})
		}
		ev := &seen{release: make(chan struct{})}
		w := New(fake.NewClientset(objs...), ev.handler(), nil)
		if w.Listed("ns", "cfg") || w.HasSynced() {
			t.Fatalf("exists=%v: listed before any watch started", exists)
		}
		ctx, cancel := context.WithCancel(t.Context())
		w.Sync(ctx, []Ref{ref})
		w.mu.Lock()
		informer := w.watches[ref].informer
		w.mu.Unlock()
		eventually(t, "the informer never read its first list", informer.HasSynced)
		if exists && w.Listed("ns", "cfg") {
			t.Fatal("listed while the first list's Add is still being handed on")
		}
		close(ev.release)
		eventually(t, "never listed", func() bool { return w.Listed("ns", "cfg") })
		_, err := w.Lister().ConfigMaps("ns").Get("cfg")
		if exists && err != nil {
			t.Errorf("listed, but the store has no ConfigMap: %v", err)
		}
		if !exists && !apierrors.IsNotFound(err) {
			t.Errorf("listed with no ConfigMap in the cluster: Get says %v, want not found", err)
		}
		if !w.HasSynced() || w.Err("ns", "cfg") != nil {
			t.Errorf("exists=%v: listed, but synced %v and Err %v", exists, w.HasSynced(), w.Err("ns", "cfg"))
		}
		list := &ev.deleted
		if exists {
			list = &ev.added
		}
		eventually(t, "the listing's event never came", func() bool { return ev.has(list, "ns/cfg") })
		if exists && ev.has(&ev.deleted, "ns/cfg") {
			t.Errorf("a ConfigMap that exists was told deleted")
		}
		cancel()
	}
}

// A watch the API server refuses counts as listed, so the nodes waiting
// for it learn why at once (a Delete wakes them, Err says it); once
// allowed, it lists and Err clears, also when the ConfigMap does not exist.
func TestRefusedWatchIsListedWithItsReasonUntilAllowed(t *testing.T) {
	client := fake.NewClientset()
	var refuse atomic.Bool
	refuse.Store(true)
	forbidden := apierrors.NewForbidden(corev1.Resource("configmaps"), "cfg", nil)
	client.PrependReactor("list", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return refuse.Load(), nil, forbidden
	})
	ev := &seen{}
	w := New(client, ev.handler(), nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w.Sync(ctx, []Ref{ref})
	eventually(t, "a refused watch never counted as listed", func() bool { return w.Listed("ns", "cfg") })
	if err := w.Err("ns", "cfg"); err == nil || !strings.Contains(err.Error(), "cannot read it") {
		t.Fatalf("Err %v, want the refusal", err)
	}
	eventually(t, "the waiting nodes were not woken", func() bool { return ev.has(&ev.deleted, "ns/cfg") })

	refuse.Store(false)
	eventually(t, "Err never cleared once allowed", func() bool { return w.Err("ns", "cfg") == nil })
	eventually(t, "never synced once allowed", w.HasSynced)
}
