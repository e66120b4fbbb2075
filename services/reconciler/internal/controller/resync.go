package controller

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
	c.nodeQ.Forget(node)
	c.nodeQ.Add(node)
	return syncsStarted
}

// syncCount is a node's syncs begun and ended.
type syncCount struct{ started, ended uint64 }

// syncBegan counts a sync of node beginning; the returned func counts it
// ending, whatever way it ends (not after the node was forgotten).
func (c *Controller) syncBegan(node string) (ended func()) {
	c.mu.Lock()
	n := c.syncs[node]
	if n == nil {
		n = &syncCount{}
		c.syncs[node] = n
	}
	n.started++
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.syncs[node] == n {
			n.ended++
		}
	}
}

// withSyncsLocked fills info's sync counts; c.mu must be held.
func (c *Controller) withSyncsLocked(info NodeInfo) NodeInfo {
	if n := c.syncs[info.Name]; n != nil {
		info.Syncs, info.SyncsStarted = n.ended, n.started
	}
	return info
}
