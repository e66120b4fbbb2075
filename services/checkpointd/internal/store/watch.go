package store

import (
	"google.golang.org/protobuf/proto"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// Watch receives the latest records after each change. It holds at most one
// pending state: a slow reader skips intermediate states and never blocks
// the writers.
type Watch struct {
	C    <-chan *nodeconfigv1.Records
	c    chan *nodeconfigv1.Records
	done chan struct{}
	s    *Store
}

// Done is closed when the store closes.
func (w *Watch) Done() <-chan struct{} { return w.done }

// Stop ends the watch.
func (w *Watch) Stop() {
	w.s.watchMu.Lock()
	defer w.s.watchMu.Unlock()
	if _, ok := w.s.watches[w]; ok {
		delete(w.s.watches, w)
		close(w.done)
	}
}

// Watch starts a watch whose channel first holds the current records.
// maxWatchers caps the number of watches (0 = no cap); ok is false when the
// cap is reached.
func (s *Store) Watch(maxWatchers int) (w *Watch, ok bool, err error) {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	if maxWatchers > 0 && len(s.watches) >= maxWatchers {
		return nil, false, nil
	}
	recs, err := s.Records()
	if err != nil {
		return nil, false, err
	}
	c := make(chan *nodeconfigv1.Records, 1)
	c <- recs
	w = &Watch{C: c, c: c, done: make(chan struct{}), s: s}
	if s.closed {
		close(w.done)
		return w, true, nil
	}
	s.watches[w] = struct{}{}
	return w, true, nil
}

// publish hands recs to every watch, replacing a state it has not read yet.
// Holding watchMu orders publications, so no watch sees an older state after
// a newer one.
func (s *Store) publish(recs *nodeconfigv1.Records) {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	// Two commits may publish in the other order; never go backwards.
	if recs.GetRevision() <= s.published {
		return
	}
	s.published = recs.GetRevision()
	for w := range s.watches {
		select {
		case <-w.c: // drop the unread older state
		default:
		}
		w.c <- proto.Clone(recs).(*nodeconfigv1.Records)
	}
}
