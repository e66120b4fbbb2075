package controller

import (
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
)

// Admission asks, on every node sync, how many of a NodeConfig's nodes are
// on trial and how many rolled back from a version. Both are kept per
// NodeConfig as nodes change, so a sync costs the same whatever the fleet's
// size (scanning every selected node made a rollout quadratic).

// trialIndex is what one NodeConfig's admission reads.
type trialIndex struct {
	onTrial    map[string]struct{}             // admitted or soaking
	rolledBack map[version]map[string]struct{} // rolled back, by the version they refused
}

// indexed is where a node is counted now.
type indexed struct {
	trialOf, rolledBackOf string
	rolledBackFrom        version
	// waitingOn and waitingLeaving are the NodeConfigs whose freed place
	// may start a node pacing holds back: the one it follows and the one
	// it leaves.
	waitingOn, waitingLeaving string
}

func (c *Controller) trialsOfLocked(nc string) *trialIndex {
	t := c.trials[nc]
	if t == nil {
		t = &trialIndex{onTrial: map[string]struct{}{}, rolledBack: map[version]map[string]struct{}{}}
		c.trials[nc] = t
	}
	return t
}

// reindexLocked moves a node to where its info says it counts. c.mu must
// be held.
func (c *Controller) reindexLocked(info *NodeInfo) {
	var want indexed
	switch {
	case info.Admitted && info.AdmittedFor != "":
		want.trialOf = info.AdmittedFor
	case info.State == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING:
		want.trialOf = info.NodeConfig
	case info.State == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING && info.NodeConfig != "" && trialOnNode(info.Records):
		// A blip (its agent unreachable, a failed promote) does not end
		// a trial under way, also for a reconciler that never admitted
		// the node; the records are the last ones read.
		want.trialOf = info.NodeConfig
	case info.State == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_CONFLICT && info.Records.Soaking():
		// Another NodeConfig selects it too, but it still soaks the
		// version of the one that assigned it, whose trial it stays in
		// until it promotes.
		want.trialOf = info.Records.GetAssigned().GetNodeConfig()
	}
	if info.State == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ROLLED_BACK && info.NodeConfig != "" {
		if v, ok := assignedVersion(info.Records); ok {
			want.rolledBackOf, want.rolledBackFrom = info.NodeConfig, v
		}
	}
	if info.State == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_WAITING {
		want.waitingOn = info.NodeConfig
		if info.DepartingFrom != info.NodeConfig {
			want.waitingLeaving = info.DepartingFrom
		}
	}
	if want == info.indexed {
		return
	}
	old := info.indexed
	for _, nc := range []string{old.waitingOn, old.waitingLeaving} {
		removeFrom(c.waiting, nc, info.Name)
	}
	for _, nc := range []string{want.waitingOn, want.waitingLeaving} {
		addTo(c.waiting, nc, info.Name)
	}
	if old.trialOf != "" {
		delete(c.trialsOfLocked(old.trialOf).onTrial, info.Name)
	}
	if old.rolledBackOf != "" {
		t := c.trialsOfLocked(old.rolledBackOf)
		delete(t.rolledBack[old.rolledBackFrom], info.Name)
		if len(t.rolledBack[old.rolledBackFrom]) == 0 {
			delete(t.rolledBack, old.rolledBackFrom)
		}
	}
	if want.trialOf != "" {
		c.trialsOfLocked(want.trialOf).onTrial[info.Name] = struct{}{}
	}
	if want.rolledBackOf != "" {
		t := c.trialsOfLocked(want.rolledBackOf)
		if t.rolledBack[want.rolledBackFrom] == nil {
			t.rolledBack[want.rolledBackFrom] = map[string]struct{}{}
		}
		t.rolledBack[want.rolledBackFrom][info.Name] = struct{}{}
	}
	info.indexed = want
	for _, name := range []string{old.trialOf, old.rolledBackOf} {
		if t := c.trials[name]; t != nil && len(t.onTrial) == 0 && len(t.rolledBack) == 0 {
			delete(c.trials, name)
		}
	}
}

// trialOnNode says whether a node's records hold a trial under way: a
// config assigned that is not proven (soaking, or its activation not done)
// and not rolled back.
func trialOnNode(recs *nodeconfigv1.Records) bool {
	a := recs.GetAssigned().GetSource()
	return a != nil && !nodeconfigv1.SameSource(a, recs.GetLastKnownGood().GetSource()) &&
		recs.GetError().GetError().GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE
}

// addTo puts node in set key of m ("" for none).
func addTo(m map[string]map[string]struct{}, key, node string) {
	if key == "" {
		return
	}
	if m[key] == nil {
		m[key] = map[string]struct{}{}
	}
	m[key][node] = struct{}{}
}

// removeFrom takes node out of set key of m, and the set once empty.
func removeFrom(m map[string]map[string]struct{}, key, node string) {
	delete(m[key], node)
	if len(m[key]) == 0 {
		delete(m, key)
	}
}

// onTrialLocked counts nc's nodes on trial, except one.
func (c *Controller) onTrialLocked(nc, except string) int {
	t := c.trials[nc]
	if t == nil {
		return 0
	}
	n := len(t.onTrial)
	if _, ok := t.onTrial[except]; ok {
		n--
	}
	return n
}

// haltCountLocked counts the nodes known to have rolled back from v: those
// nc's status keeps and those rolled back now.
func (c *Controller) haltCountLocked(nc *v1alpha1.NodeConfig, v version) int {
	nodes := c.rolledBackLocked(nc, v, nil)
	if t := c.trials[nc.Name]; t != nil {
		for name := range t.rolledBack[v] {
			nodes[name] = true
		}
	}
	return len(nodes)
}
