package rollout

import (
	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// set is a set of node names.
type set = map[string]struct{}

// trialIndex is what one NodeConfig's admission reads.
type trialIndex struct {
	onTrial    set             // admitted or soaking
	rolledBack map[Version]set // rolled back, by the version they refused
}

// position is where a node is counted.
type position struct {
	trialOf, rolledBackOf string
	rolledBackFrom        Version
	// waitingOn and waitingLeaving are the NodeConfigs whose freed place
	// may start a node pacing holds back: the one it follows and the one
	// it leaves.
	waitingOn, waitingLeaving string
}

// positionOf is where a seat counts by its facts and marks.
func positionOf(s *seat) position {
	var p position
	switch {
	case s.admitted && s.admittedFor != "":
		p.trialOf = s.admittedFor
	case s.State == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING:
		p.trialOf = s.NodeConfig
	case s.State == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING && s.NodeConfig != "" && trialOnNode(s.Records):
		// A blip (its agent unreachable, a failed promote) does not end
		// a trial under way, also for a reconciler that never admitted
		// the node; the records are the last ones read.
		p.trialOf = s.NodeConfig
	case s.State == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_CONFLICT && records.Soaking(s.Records):
		// Another NodeConfig selects it too, but it still soaks the
		// version of the one that assigned it, whose trial it stays in
		// until it promotes.
		p.trialOf = s.Records.GetAssigned().GetNodeConfig()
	}
	if s.State == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ROLLED_BACK && s.NodeConfig != "" {
		if v, ok := AssignedVersion(s.Records); ok {
			p.rolledBackOf, p.rolledBackFrom = s.NodeConfig, v
		}
	}
	if s.State == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_WAITING {
		p.waitingOn = s.NodeConfig
		if s.departingFrom != s.NodeConfig {
			p.waitingLeaving = s.departingFrom
		}
	}
	return p
}

// trialOnNode says whether a node's records hold a trial under way: a
// config assigned that is not proven (soaking, or its activation not done)
// and not rolled back.
func trialOnNode(recs *nodeconfigv1.Records) bool {
	a := recs.GetAssigned().GetSource()
	return a != nil && !records.SameSource(a, recs.GetLastKnownGood().GetSource()) &&
		recs.GetError().GetError().GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE
}

func (b *Book) trialsOfLocked(nc string) *trialIndex {
	t := b.trials[nc]
	if t == nil {
		t = &trialIndex{onTrial: set{}, rolledBack: map[Version]set{}}
		b.trials[nc] = t
	}
	return t
}

// reindexLocked moves a node to where its seat says it counts.
func (b *Book) reindexLocked(node string, s *seat) {
	want := positionOf(s)
	if want == s.at {
		return
	}
	old := s.at
	for _, nc := range []string{old.waitingOn, old.waitingLeaving} {
		removeFrom(b.waiting, nc, node)
	}
	for _, nc := range []string{want.waitingOn, want.waitingLeaving} {
		addTo(b.waiting, nc, node)
	}
	if old.trialOf != "" {
		delete(b.trialsOfLocked(old.trialOf).onTrial, node)
	}
	if old.rolledBackOf != "" {
		t := b.trialsOfLocked(old.rolledBackOf)
		delete(t.rolledBack[old.rolledBackFrom], node)
		if len(t.rolledBack[old.rolledBackFrom]) == 0 {
			delete(t.rolledBack, old.rolledBackFrom)
		}
	}
	if want.trialOf != "" {
		b.trialsOfLocked(want.trialOf).onTrial[node] = struct{}{}
	}
	if want.rolledBackOf != "" {
		t := b.trialsOfLocked(want.rolledBackOf)
		if t.rolledBack[want.rolledBackFrom] == nil {
			t.rolledBack[want.rolledBackFrom] = set{}
		}
		t.rolledBack[want.rolledBackFrom][node] = struct{}{}
	}
	s.at = want
	for _, name := range []string{old.trialOf, old.rolledBackOf} {
		if t := b.trials[name]; t != nil && len(t.onTrial) == 0 && len(t.rolledBack) == 0 {
			delete(b.trials, name)
		}
	}
}

// addTo puts node in set key of m ("" for none).
func addTo(m map[string]set, key, node string) {
	if key == "" {
		return
	}
	if m[key] == nil {
		m[key] = set{}
	}
	m[key][node] = struct{}{}
}

// removeFrom takes node out of set key of m, and the set once empty.
func removeFrom(m map[string]set, key, node string) {
	delete(m[key], node)
	if len(m[key]) == 0 {
		delete(m, key)
	}
}
