package rollout

import (
	"nodeconfig.io/proto/nodeconfig/records"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/policy"
)

// A node that no NodeConfig selects any more returns to its local default.
// One selector edit can make a whole fleet leave at once, so the reset is
// paced like any other change: it takes a place in the trial of the
// NodeConfig whose config the node leaves and holds it for that
// NodeConfig's soak, counted from the reset's record on the node itself, so
// that a new leader paces the same way.

// Lets says whether nc lets the nodes it selects go back to their local
// default: it is being deleted, or names no source.
func Lets(nc *v1alpha1.NodeConfig) bool {
	return nc.DeletionTimestamp != nil || nc.Spec.Source == nil || nc.Spec.Source.ConfigMap == nil
}

// Depart marks node as leaving nc and paces its reset by nc's trial: the
// node waits while nc is held, while not every node was seen (one may be
// soaking its own reset) unless its trial takes every node, while the trial
// is full, or for another wave.
func (b *Book) Depart(nc *v1alpha1.NodeConfig, node string, ask Ask) policy.Admission {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.seatLocked(node)
	b.departLocked(node, s, nc.Name)
	if ask.Held != "" || b.waitsForUnseenLocked(nc, ask) {
		return policy.Wait
	}
	if b.freePlacesLocked(nc, ask.Selected, node) <= 0 {
		return policy.Wait
	}
	if ask.Waves != nil && b.waitsForAnotherWaveLocked(nc.Name, node, ask.Waves) {
		return policy.Wait
	}
	// A departure's place is counted by departuresInTrialLocked, not as a
	// trial of nc.
	s.admitted, s.admittedFor = true, ""
	b.reindexLocked(node, s)
	return policy.Admitted
}

// departuresInTrialLocked counts the nodes leaving ncName whose reset is
// admitted or still soaking, except one.
func (b *Book) departuresInTrialLocked(ncName, except string) int {
	now := b.now()
	n := 0
	for name := range b.departing[ncName] {
		if s := b.seats[name]; s != nil && name != except && (s.admitted || records.ResetSoaking(s.Records, now)) {
			n++
		}
	}
	return n
}

// departLocked marks node as leaving ncName ("" for none).
func (b *Book) departLocked(node string, s *seat, ncName string) {
	if s.departingFrom == ncName {
		return
	}
	removeFrom(b.departing, s.departingFrom, node)
	s.departingFrom = ncName
	addTo(b.departing, ncName, node)
	b.reindexLocked(node, s)
}
