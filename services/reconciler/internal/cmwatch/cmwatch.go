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
	err     error // the last list or watch error, nil once it works
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
	// The client says whether it can stream the first list as watch
	// events (a fake cannot).
	lw := cache.ToListWatcherWithWatchListSemantics(kubeapi.OneObject(r.Name, cms.List, cms.Watch), w.kube)
	cw := &cmWatch{informer: cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})}
	if w.transform != nil {
		_ = cw.informer.SetTransform(w.transform)
	}
	_ = cw.informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		cw.mu.Lock()
		cw.err = err
		cw.mu.Unlock()
	})
	cw.handled, _ = cw.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			cw.ok()
			_ = w.store.Add(obj)
			w.handler.OnAdd(obj, false)
		},
		UpdateFunc: func(old, cur any) {
			cw.ok()
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

// tellIfAbsent waits for the watch's first list and, when it found no
// ConfigMap, tells the handler with OnDelete of one that carries only the
// name: whoever waited for the list (Listed) looks again and finds it
// missing, where a ConfigMap that exists brings its own OnAdd.
func (w *Watcher) tellIfAbsent(ctx context.Context, cw *cmWatch, r Ref) {
	if !cache.WaitForCacheSync(ctx.Done(), cw.handled.HasSynced) {
		return
	}
	if _, found, _ := w.store.GetByKey(r.Namespace + "/" + r.Name); !found {
		w.handler.OnDelete(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.Name}})
	}
}

func (cw *cmWatch) ok() {
	cw.mu.Lock()
	cw.err = nil
	cw.mu.Unlock()
}

// HasSynced reports whether Sync ran and every watch has listed once (or
// failed to: a ConfigMap the reconciler may not read must not hold the
// others back).
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
// once (or failed to, which Err says). Before that, one missing from the
// store may well exist: a NodeConfig that names it was just created or
// changed, and its watch just started.
func (w *Watcher) Listed(namespace, name string) bool {
	w.mu.Lock()
	cw, ok := w.watches[Ref{namespace, name}]
	w.mu.Unlock()
	return ok && cw.listed()
}

func (cw *cmWatch) listed() bool {
	return cw.handled.HasSynced() || cw.lastErr() != nil
}

func (cw *cmWatch) lastErr() error {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return cw.err
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
	if err := cw.lastErr(); err != nil {
		return fmt.Errorf("the reconciler cannot read it (%w); grant its ServiceAccount get, list and watch on ConfigMaps in namespace %s", err, namespace)
	}
	return nil
}
