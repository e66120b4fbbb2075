package store

import (
	"fmt"
	"sync"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
)

// putGroup commits concurrent puts together, several in one fsynced
// transaction, without a timer. A put that finds no commit running commits
// at once: a lone put never waits for company. The puts that arrive while
// a commit runs go in the next one, which starts as soon as it ends.
//
// A commit takes at most half of the puts in flight (encoding, waiting or
// committing), so that one half encodes while the other commits. Taking
// every waiting put instead ends in a convoy: all the writers of a large
// commit go back to encoding at once, the next commit has almost nobody
// to take, and the disk and the cores take turns instead of working
// together. (bbolt's Batch waits a fixed window for company while the
// writers it holds sit idle.)
type putGroup struct {
	mu      sync.Mutex
	queue   []*putCall
	leading bool // a put is committing, and will hand the queue over

	// inflight counts the PutPayload calls between the start of their
	// encoding and their return.
	inflight atomic.Int32
}

// maxGroupBytes bounds the data of one commit; a put larger than that
// goes alone.
const maxGroupBytes = 32 << 20

// putCall is one PutPayload waiting to be committed.
type putCall struct {
	key []byte
	p   Payload // digest and storage time set
	enc encoded

	stored  Payload
	created bool
	err     error

	// wake says false when the call was committed by another put, true
	// when this put is to lead the next commit.
	wake chan bool
}

// put commits c, with others that are waiting, and returns when c is
// committed.
func (g *putGroup) put(c *putCall, commit func([]*putCall)) {
	c.wake = make(chan bool, 1)
	g.mu.Lock()
	g.queue = append(g.queue, c)
	if g.leading {
		g.mu.Unlock()
		if lead := <-c.wake; !lead {
			return
		}
		g.mu.Lock()
	}
	g.leading = true
	// c is first in the queue: it arrived to find nobody committing, or it
	// was handed the lead as the queue's head.
	limit := max(1, (int(g.inflight.Load())+1)/2)
	var calls []*putCall
	size := 0
	for len(g.queue) > 0 && len(calls) < limit && (len(calls) == 0 || size+len(*g.queue[0].enc.block) <= maxGroupBytes) {
		size += len(*g.queue[0].enc.block)
		calls = append(calls, g.queue[0])
		g.queue = g.queue[1:]
	}
	g.mu.Unlock()

	commit(calls)

	// Hand the queue over first, so that the next commit starts at once.
	g.mu.Lock()
	if len(g.queue) > 0 {
		g.queue[0].wake <- true
	} else {
		g.leading = false
	}
	g.mu.Unlock()
	for _, other := range calls {
		if other != c {
			other.wake <- false
		}
	}
}

// commitPuts stores calls in one transaction and sets each one's result.
// A put that bbolt refuses is taken out and told so, and the others are
// committed without it; a failed commit fails them all.
func (s *Store) commitPuts(calls []*putCall) {
	for len(calls) > 0 {
		failed := -1
		err := s.db.Update(func(tx *bolt.Tx) error {
			payloads := tx.Bucket(bucketPayloads)
			for i, c := range calls {
				c.stored, c.created, c.err = Payload{}, false, nil
				// Bucket sees this transaction's own puts: two puts of
				// one key in one commit store it once.
				b, err := payloadBucket(payloads, c.key)
				if err != nil {
					c.err = err
					continue
				}
				if b != nil {
					existing, err := readHeader(b)
					if err != nil {
						c.err = err
						continue
					}
					if existing.SHA256 != c.p.SHA256 {
						c.err = fmt.Errorf("%w: %s has sha256 %s, the request has %s", ErrConflict, c.key, existing.SHA256, c.p.SHA256)
						continue
					}
					// The same digest is the same data.
					existing.Data = c.p.Data
					c.stored = existing
					continue
				}
				if err := writePayload(payloads, c.key, c.enc); err != nil {
					failed = i
					return err
				}
				c.stored, c.created = c.p, true
			}
			return nil
		})
		if failed >= 0 {
			c := calls[failed]
			c.stored, c.created, c.err = Payload{}, false, err
			calls = append(calls[:failed:failed], calls[failed+1:]...)
			continue
		}
		if err != nil {
			for _, c := range calls {
				c.stored, c.created, c.err = Payload{}, false, err
			}
		}
		return
	}
}
