package lifecycle

import (
	"fmt"
	"sync"

	"nodeconfig.io/services/checkpointd/internal/store"
)

// Watch follows the records: its channel first holds the current ones,
// then the latest after each change. Done is closed when the store closes.
type Watch struct {
	*store.Watch
	stop sync.Once
	n    *Node
}

// Watch starts a records watch, or fails with ErrTooManyWatchers when
// every place is taken.
func (n *Node) Watch() (*Watch, error) {
	w, ok, err := n.store.Watch(n.maxWatchers)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w (at most %d)", ErrTooManyWatchers, n.maxWatchers)
	}
	n.metrics.watchers.Inc()
	return &Watch{Watch: w, n: n}, nil
}

// Stop ends the watch and gives its place back.
func (w *Watch) Stop() {
	w.stop.Do(func() {
		w.n.metrics.watchers.Dec()
		w.Watch.Stop()
	})
}
