package controller

import (
	"sync"
	"time"
)

// listingWaits are the nodes whose last sync waited for their ConfigMap's
// first listing. The listing's event brings them back; the recheck then
// queues only the ones still waiting, so that a node the event brought
// back costs no second sync (a work queue's AddAfter cannot be taken back:
// after a new NodeConfig, every node of a large fleet may have waited).
type listingWaits struct {
	mu      sync.Mutex
	nodes   map[string]struct{}
	recheck time.Duration
}

// wait notes that name waited and, unless it already did, queues it with
// requeue after the recheck delay if it is still waiting then.
func (w *listingWaits) wait(name string, requeue func(string)) {
	w.mu.Lock()
	if w.nodes == nil {
		w.nodes = map[string]struct{}{}
	}
	_, already := w.nodes[name]
	w.nodes[name] = struct{}{}
	w.mu.Unlock()
	if already {
		return
	}
	time.AfterFunc(w.recheck, func() {
		w.mu.Lock()
		_, still := w.nodes[name]
		delete(w.nodes, name)
		w.mu.Unlock()
		if still {
			requeue(name)
		}
	})
}

// done notes that name's sync got past its ConfigMap's listing.
func (w *listingWaits) done(name string) {
	w.mu.Lock()
	delete(w.nodes, name)
	w.mu.Unlock()
}
