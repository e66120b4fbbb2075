package controller

import (
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/policy"
	"nodeconfig.io/services/reconciler/internal/rollout"
)

// departFor paces the reset of one node by the NodeConfig it leaves
// (rollout.Book.Depart).
func (c *Controller) departFor(node string) func(from *nodeconfigv1.ConfigSource, assignedBy string) (policy.Admission, int64, string) {
	return func(from *nodeconfigv1.ConfigSource, assignedBy string) (policy.Admission, int64, string) {
		nc := c.leaving(node, from, assignedBy)
		if nc == nil {
			// The NodeConfig is gone, and no other uses that config:
			// nothing to pace by.
			return policy.Admitted, 0, ""
		}
		soak := c.book.Policy(nc).SoakSeconds
		if nc.Annotations[v1alpha1.AnnotationResetNow] == "true" {
			return policy.Admitted, soak, nc.Name
		}
		ask := rollout.Ask{Held: c.book.Held(nc).Reason}
		if ask.Held == "" {
			ask.Seen = c.everyNodeSeen(node)
			ask.Selected = len(c.selectedNodes(nc))
			// A NodeConfig that lets its nodes go waits for those it
			// selects, not only for those that asked to leave it.
			var letting []string
			if rollout.Lets(nc) {
				letting = c.selectedNodes(nc)
			}
			ask.Waves = c.wavesOf(nc, letting, rollout.Want{})
		}
		return c.book.Depart(nc, node, ask), soak, nc.Name
	}
}

// leaving is the NodeConfig a departing node leaves: the one the node
// recorded (with its assignment, or its reset), else the one whose source
// is the config the node runs, else the one it departs from or was last
// selected by as this reconciler remembers. The node's own record is what
// holds when one edit changed both the selector and the source and a new
// leader never saw the node selected.
func (c *Controller) leaving(node string, from *nodeconfigv1.ConfigSource, recorded string) *v1alpha1.NodeConfig {
	if nc := c.nodeConfigNamed(recorded); nc != nil {
		return nc
	}
	if nc := c.nodeConfigUsing(from); nc != nil {
		return nc
	}
	departingFrom, following := c.book.Remembered(node)
	for _, name := range []string{departingFrom, following} {
		if nc := c.nodeConfigNamed(name); nc != nil {
			return nc
		}
	}
	return nil
}
