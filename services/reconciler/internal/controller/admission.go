package controller

import (
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/pacing"
	"nodeconfig.io/services/reconciler/internal/policy"
)

// pace applies the NodeConfig's rollout limits to one node and one version.
// The count and the reservation happen under one lock, so two workers can
// never both take the last place in the trial.
func (c *Controller) pace(nc *v1alpha1.NodeConfig, node string, v version) func() policy.Admission {
	return func() policy.Admission {
		seen := c.everyNodeSeen(node)
		selected := c.selectedNodes(nc)
		held := c.trialsHeld(nc)
		c.mu.Lock()
		defer c.mu.Unlock()
		// Nodes leaving nc share its trial (see depart.go).
		limit := pacing.MaxInTrial(nc.Spec.Rollout.MaxInTrial, len(selected)+len(c.departing[nc.Name]))
		// Counted before the wait for unseen nodes: a halt is durable and
		// holds whatever the nodes not seen yet say.
		if pacing.Halted(c.haltCountLocked(nc, v), pacing.MaxFailures(nc.Spec.Rollout.MaxFailures)) {
			return policy.Halted
		}
		if held.reason != "" {
			return policy.Wait
		}
		if !seen {
			// A node not synced since this reconciler started may be soaking
			// a reset that left nc.
			return policy.Wait
		}
		inTrial := c.departuresInTrialLocked(nc.Name, node) + c.onTrialLocked(nc.Name, node)
		if inTrial >= limit {
			return policy.Wait
		}
		info := c.infoLocked(node)
		info.Admitted, info.AdmittedFor = true, nc.Name
		c.reindexLocked(info)
		return policy.Admitted
	}
}

// wakeWaiting enqueues the nodes pacing held back, now that a slot is free.
func (c *Controller) wakeWaiting(ncName string) {
	c.mu.Lock()
	var waiting []string
	for name, n := range c.nodes {
		if (n.NodeConfig == ncName || n.DepartingFrom == ncName) && n.State == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_WAITING {
			waiting = append(waiting, name)
		}
	}
	c.mu.Unlock()
	for _, name := range waiting {
		c.nodeQ.Add(name)
	}
}
