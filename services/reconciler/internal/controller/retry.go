package controller

import "time"

// failedLocked notes a failed sync of info's node at now and schedules its
// retry (info.NextReconcile). A failure grows the node's backoff only once
// the retry the last counted one scheduled has come due. The syncs that
// events bring in before then (the agent's Pod and the Node updated many
// times while the agent restarts) still run, so a recovery is seen at
// once, but they leave the backoff and the pending retry as they were:
// counted per trigger, a burst of updates would take the node to the
// two-minute cap within seconds and leave it unsynced for minutes after
// its agent is back. c.mu must be held.
func (c *Controller) failedLocked(info *NodeInfo, now time.Time) {
	if now.Before(info.retryDue) {
		info.NextReconcile = info.retryDue
		return
	}
	info.Backoff = c.nodeRetry.When(info.Name)
	info.Failures = c.nodeRetry.NumRequeues(info.Name)
	info.retryDue = now.Add(info.Backoff)
	info.NextReconcile = info.retryDue
}

// dropBackoff forgets a node's failures: its next sync counts as a retry
// come due, and a failure of it starts again from the base delay.
func (c *Controller) dropBackoff(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodeQ.Forget(node)
	if info := c.nodes[node]; info != nil {
		info.retryDue = time.Time{}
	}
}
