package controller

import (
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/policy"
	"nodeconfig.io/services/reconciler/internal/rollout"
)

// pace asks the rollout book whether node may start a trial of nc's
// version want now. The caches are read before the book is asked: it
// holds its lock only over its own indexes.
func (c *Controller) pace(nc *v1alpha1.NodeConfig, node string, want rollout.Want) func() policy.Admission {
	return func() policy.Admission {
		seen := c.everyNodeSeen(node)
		selected := c.selectedNodes(nc)
		held := c.book.Held(nc)
		ask := rollout.Ask{Seen: seen, Selected: len(selected), Held: held.Reason}
		if held.Reason == "" {
			ask.Waves = c.wavesOf(nc, selected, want)
		}
		return c.book.Admit(nc, node, rollout.VersionOf(want.Source, want.Validator), ask)
	}
}

// wakeWaiting enqueues the nodes pacing held back on ncName that its
// trial has free places for (rollout.Book.Waking).
func (c *Controller) wakeWaiting(ncName string) {
	nc := c.nodeConfigNamed(ncName)
	var selected int
	var waves *rollout.Waves
	if nc != nil {
		selected = len(c.selectedNodes(nc))
		waves = c.wavesOf(nc, nil, rollout.Want{})
	}
	for _, name := range c.book.Waking(ncName, nc, selected, waves) {
		c.nodeQ.Add(name)
	}
}
