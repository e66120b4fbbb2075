package controller

import "errors"

// Resync reconciles a node now, dropping its backoff. It returns the
// node's SyncsStarted before the ask: the node has been synced since once
// its Syncs is past that. The count is read before the node is queued, so a
// sync is sure to begin after it (if one is under way, the queue runs the
// node again once it ends).
func (c *Controller) Resync(node string) (syncsStarted uint64) {
	c.mu.Lock()
	if n := c.syncs[node]; n != nil {
		syncsStarted = n.started
	}
	c.mu.Unlock()
	c.dropBackoff(node)
	c.nodeQ.Add(node)
	return syncsStarted
}

// syncCount is a node's syncs begun, and the place among them of the last
// one that completed: a node's syncs run one at a time, so that is also
// how many syncs had begun when it did.
type syncCount struct{ started, lastEnded uint64 }

// syncBegan counts a sync of node beginning; the returned func takes the
// sync's error and counts it completed, whatever way it ended, unless it
// waits (errWaits) or the node was forgotten meanwhile.
func (c *Controller) syncBegan(node string) (ended func(error)) {
	c.mu.Lock()
	n := c.syncs[node]
	if n == nil {
		n = &syncCount{}
		c.syncs[node] = n
	}
	n.started++
	place := n.started
	c.mu.Unlock()
	return func(err error) {
		if errors.Is(err, errWaits) {
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.syncs[node] == n {
			n.lastEnded = place
		}
	}
}

// withSyncsLocked fills info's sync counts; c.mu must be held.
func (c *Controller) withSyncsLocked(info NodeInfo) NodeInfo {
	if n := c.syncs[info.Name]; n != nil {
		info.Syncs, info.SyncsStarted = n.lastEnded, n.started
	}
	return info
}
