package rollout

import (
	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// Sync is a node sync's outcome, as the Book needs it.
type Sync struct {
	Facts
	// Failed says the sync ended early with an error.
	Failed bool
	// Following says a NodeConfig that wants a config on the node selects
	// it: it leaves nothing.
	Following bool
	// Leaving names the NodeConfig whose config a node not followed left,
	// if its reset still soaks ("" for none).
	Leaving string
}

// Synced books a node sync's outcome: the node's trial ends once its state
// says so, and its departure mark follows its records. It returns the
// NodeConfigs whose waiting nodes may now start: the one the node departed
// from, then the one whose trial it left.
func (b *Book) Synced(node string, sync Sync) (freed []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.seatLocked(node)
	prevTrial := s.at.trialOf
	s.Facts = sync.Facts
	switch s.State {
	case nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING, nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING,
		nodeconfigv1.LifecycleState_LIFECYCLE_STATE_UNSPECIFIED:
	default:
		// The trial, if any, is over.
		s.admitted, s.admittedFor = false, ""
	}
	if sync.Failed && s.admittedFor != "" && !trialOnNode(s.Records) {
		// Failed before its trial started: nothing unproven runs on the
		// node, so its place protects nothing, and kept through the
		// retries of a node that may never heal it would stall the
		// rollout. The retry asks admission again, as any waiting node.
		// A node that fails once its trial started keeps the place.
		s.admitted, s.admittedFor = false, ""
	}
	b.reindexLocked(node, s)
	// The departure mark is set while the node's reset soaks (also after
	// a fail-over), cleared when it is selected again or its reset's soak
	// ended.
	switch {
	case sync.Following:
		b.departLocked(node, s, "")
	case records.ResetSoaking(s.Records, b.now()) && sync.Leaving != "":
		b.departLocked(node, s, sync.Leaving)
	case s.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_WAITING && s.departingFrom != "":
		freed = append(freed, s.departingFrom)
		b.departLocked(node, s, "")
	}
	if prevTrial != "" && prevTrial != s.at.trialOf {
		freed = append(freed, prevTrial)
	}
	return freed
}

// Forget drops a deleted node, and returns the NodeConfig it departed
// from ("" for none): its place is free.
func (b *Book) Forget(node string) (departedFrom string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.seats[node]
	if s == nil {
		return ""
	}
	departedFrom = s.departingFrom
	b.departLocked(node, s, "")
	s.admitted, s.admittedFor, s.State = false, "", nodeconfigv1.LifecycleState_LIFECYCLE_STATE_UNSPECIFIED
	b.reindexLocked(node, s)
	delete(b.seats, node)
	return departedFrom
}
