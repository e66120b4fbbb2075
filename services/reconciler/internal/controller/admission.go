package controller

import (
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
		if c.freePlacesLocked(nc, len(selected), node) <= 0 {
			return policy.Wait
		}
		info := c.infoLocked(node)
		info.Admitted, info.AdmittedFor = true, nc.Name
		c.reindexLocked(info)
		return policy.Admitted
	}
}

// freePlacesLocked is how many more nodes nc's trial takes, not counting
// except ("" for none) among those in it. Nodes leaving nc share its trial
// (see depart.go), so its limit is a share of them and of the selected
// nodes. c.mu must be held.
func (c *Controller) freePlacesLocked(nc *v1alpha1.NodeConfig, selected int, except string) int {
	total := selected + len(c.departing[nc.Name])
	if lets(nc) {
		// Its departing nodes are among those it selects.
		total = selected
	}
	limit := pacing.MaxInTrial(nc.Spec.Rollout.MaxInTrial, total)
	return limit - c.departuresInTrialLocked(nc.Name, except) - c.onTrialLocked(nc.Name, except)
}

// wakeWaiting enqueues the nodes pacing held back on ncName, as many as
// its trial has free places (any of them: the one that syncs first takes
// a place). Each woken node asks its agent, so waking every waiting node
// for each freed place would cost thousands of syncs per place in a large
// paced rollout; the nodes left waiting look again on the next freed place
// or their own requeue.
func (c *Controller) wakeWaiting(ncName string) {
	nc := c.nodeConfigNamed(ncName)
	var selected int
	if nc != nil {
		selected = len(c.selectedNodes(nc))
	}
	c.mu.Lock()
	free := len(c.waiting[ncName])
	if nc != nil {
		free = c.freePlacesLocked(nc, selected, "")
	}
	waiting := make([]string, 0, max(0, min(free, len(c.waiting[ncName]))))
	for name := range c.waiting[ncName] {
		if len(waiting) >= free {
			break
		}
		waiting = append(waiting, name)
	}
	c.mu.Unlock()
	for _, name := range waiting {
		c.nodeQ.Add(name)
	}
}
