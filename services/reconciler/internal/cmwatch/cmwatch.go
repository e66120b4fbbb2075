// Package cmwatch caches only the ConfigMaps that NodeConfigs name: one
// watch per ConfigMap (its namespace, a metadata.name field selector), all
// feeding one store the controller reads through a lister. The reconciler
// then needs read access to those ConfigMaps alone (a Role per namespace,
// resourceNames allowed), and its memory does not grow with the cluster's
// other ConfigMaps.
package cmwatch

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"nodeconfig.io/services/servekit/kubeapi"
)

// Ref names one ConfigMap.
type Ref struct{ Namespace, Name string }

// Watcher keeps one watch per referenced ConfigMap.
type Watcher struct {
	kube      kubernetes.Interface
	handler   cache.ResourceEventHandler
	transform cache.TransformFunc
	store     cache.Indexer

	mu      sync.Mutex
	watches map[Ref]*cmWatch
	started bool // Sync ran once
}

type cmWatch struct {
	informer cache.SharedIndexInformer
	// handled is the registration of the handler that fills the store:
	// its HasSynced turns true once the first list is in the store (the
	// informer's own once the list is read, maybe before).
	handled cache.ResourceEventHandlerRegistration
	stop    context.CancelFunc
	mu      sync.Mutex
	// denied is the last refusal of a list or watch (forbidden,
	// unauthorized), nil once one succeeds. Other errors pass: the
	// reflector retries them.
	denied error
}

// New builds a watcher whose events go to handler (after the store has
// them); transform trims what is kept.
func New(kube kubernetes.Interface, handler cache.ResourceEventHandler, transform cache.TransformFunc) *Watcher {
	return &Watcher{
		kube: kube, handler: handler, transform: transform,
		store:   cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		watches: map[Ref]*cmWatch{},
	}
}

// Lister reads the watched ConfigMaps.
func (w *Watcher) Lister() corelisters.ConfigMapLister {
	return corelisters.NewConfigMapLister(w.store)
}

// Sync watches exactly refs: new ones start, ones no longer named stop and
// leave the store.
func (w *Watcher) Sync(ctx context.Context, refs []Ref) {
	want := make(map[Ref]bool, len(refs))
	for _, r := range refs {
		want[r] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.started = true
	for r, cw := range w.watches {
		if !want[r] {
			cw.stop()
			delete(w.watches, r)
			if obj, ok, _ := w.store.GetByKey(r.Namespace + "/" + r.Name); ok {
				_ = w.store.Delete(obj)
				w.handler.OnDelete(obj)
			}
		}
	}
	for r := range want {
		if _, ok := w.watches[r]; !ok {
			w.watches[r] = w.start(ctx, r)
		}
	}
}

func (w *Watcher) start(ctx context.Context, r Ref) *cmWatch {
	cms := w.kube.CoreV1().ConfigMaps(r.Namespace)
	cw := &cmWatch{}
	// The client says whether it can stream the first list as watch
	// events (a fake cannot).
	lw := cache.ToListWatcherWithWatchListSemantics(kubeapi.OneObject(r.Name, allowing(cw, cms.List), allowing(cw, cms.Watch)), w.kube)
	cw.informer = cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	if w.transform != nil {
		_ = cw.informer.SetTransform(w.transform)
	}
	_ = cw.informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		if !apierrors.IsForbidden(err) && !apierrors.IsUnauthorized(err) {
			return
		}
		cw.mu.Lock()
		first := cw.denied == nil
		cw.denied = err
		cw.mu.Unlock()
		if first && !cw.handled.HasSynced() {
			// Whoever waits for the list learns now that none will come.
			w.tellMissing(r)
		}
	})
	cw.handled, _ = cw.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			_ = w.store.Add(obj)
			w.handler.OnAdd(obj, false)
		},
		UpdateFunc: func(old, cur any) {
			_ = w.store.Update(cur)
			w.handler.OnUpdate(old, cur)
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			_ = w.store.Delete(obj)
			w.handler.OnDelete(obj)
		},
	})
	wctx, cancel := context.WithCancel(ctx)
	cw.stop = cancel
	go cw.informer.RunWithContext(wctx)
	go w.tellIfAbsent(wctx, cw, r)
	return cw
}

// tellIfAbsent waits for the watch's first list and tells the handler
// when it found no ConfigMap (tellMissing); a ConfigMap that exists
// brings its own OnAdd.
func (w *Watcher) tellIfAbsent(ctx context.Context, cw *cmWatch, r Ref) {
	select {
	case <-ctx.Done():
		return
	case <-cw.handled.HasSyncedChecker().Done():
	}
	if _, found, _ := w.store.GetByKey(r.Namespace + "/" + r.Name); !found {
		w.tellMissing(r)
	}
}

// tellMissing hands the handler OnDelete of a ConfigMap that carries only
// r's name: whoever waited for the list (Listed) looks again and finds it
// missing, or unreadable (Err).
func (w *Watcher) tellMissing(r Ref) {
	w.handler.OnDelete(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.Name}})
}

// allowing wraps a list or watch call of cw's: one that succeeds clears
// a refusal.
func allowing[T any](cw *cmWatch, call func(context.Context, metav1.ListOptions) (T, error)) func(context.Context, metav1.ListOptions) (T, error) {
	return func(ctx context.Context, opts metav1.ListOptions) (T, error) {
		v, err := call(ctx, opts)
		if err == nil {
			cw.mu.Lock()
			cw.denied = nil
			cw.mu.Unlock()
		}
		return v, err
	}
}

// HasSynced reports whether Sync ran and every watch it started has
// listed once (or was refused: a ConfigMap the reconciler may not read
// must not hold the others back). Sync may first run before every
// NodeConfig is seen; a node whose ConfigMap is not watched yet waits for
// it (Listed).
func (w *Watcher) HasSynced() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.started {
		return false
	}
	for _, cw := range w.watches {
		if !cw.listed() {
			return false
		}
	}
	return true
}

// Listed reports whether the watch of the named ConfigMap has listed it
// once (or was refused, which Err says). Before that, one missing from the
// store may well exist: a NodeConfig that names it was just created or
// changed, and its watch just started.
func (w *Watcher) Listed(namespace, name string) bool {
	w.mu.Lock()
	cw, ok := w.watches[Ref{namespace, name}]
	w.mu.Unlock()
	return ok && cw.listed()
}

func (cw *cmWatch) listed() bool {
	return cw.handled.HasSynced() || cw.lastDenied() != nil
}

func (cw *cmWatch) lastDenied() error {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return cw.denied
}

// Err says why a referenced ConfigMap cannot be read (forbidden, say), or
// nil.
func (w *Watcher) Err(namespace, name string) error {
	w.mu.Lock()
	cw, ok := w.watches[Ref{namespace, name}]
	w.mu.Unlock()
	if !ok {
		return nil
	}
	if err := cw.lastDenied(); err != nil {
		return fmt.Errorf("the reconciler cannot read it (%w); grant its ServiceAccount get, list and watch on ConfigMaps in namespace %s", err, namespace)
	}
	return nil
}
