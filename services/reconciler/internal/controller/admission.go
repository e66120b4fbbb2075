package controller

import (
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/policy"
	"nodeconfig.io/services/reconciler/internal/rollout"
)

// pace asks the rollout book whether node may start a trial of nc's
// version v now. The caches are read before the book is asked: it holds
// its lock only over its own indexes.
func (c *Controller) pace(nc *v1alpha1.NodeConfig, node string, v rollout.Version) func() policy.Admission {
	return func() policy.Admission {
		seen := c.everyNodeSeen(node)
		selected := c.selectedNodes(nc)
		held := c.book.Held(nc)
		return c.book.Admit(nc, node, v, rollout.Ask{Seen: seen, Selected: len(selected), Held: held.Reason})
	}
}

// wakeWaiting enqueues the nodes pacing held back on ncName that its
// trial has free places for (rollout.Book.Waking).
func (c *Controller) wakeWaiting(ncName string) {
	nc := c.nodeConfigNamed(ncName)
	var selected int
	if nc != nil {
		selected = len(c.selectedNodes(nc))
	}
	for _, name := range c.book.Waking(ncName, nc, selected, nil) {
		c.nodeQ.Add(name)
	}
}
