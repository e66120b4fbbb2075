package lifecycle

import (
	"errors"

	"google.golang.org/protobuf/proto"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/checkpointd/internal/guard"
)

// lkgPayload is last-known-good's bytes for the start guard; one that no
// longer loads gives the local default, as a rollback does.
func (n *Node) lkgPayload(src *nodeconfigv1.ConfigSource) ([]byte, error) {
	b, err := n.content(src)
	if err != nil {
		n.log.Error("last-known-good does not load; the start guard falls back to the local default", "err", err)
		return nil, nil
	}
	return b, nil
}

// guardActivatingLocked tells the guard of the trial activating the
// assigned config starts, before the file holds it.
func (n *Node) guardActivatingLocked(recs *nodeconfigv1.Records) error {
	if n.guard == nil {
		return nil
	}
	t, err := activatingTrial(recs, n.guard.Target(n.target.Path()), n.lkgPayload)
	if err != nil {
		return err
	}
	return n.guard.Sync(t)
}

// syncGuardLocked keeps the guard's trial in step with the records: the
// active config while it is not last-known-good. A failure is logged: the
// records stand, and the next change writes the trial again.
func (n *Node) syncGuardLocked() {
	if n.guard == nil || n.target.Dir == "" {
		return
	}
	recs, err := n.store.Records()
	if err == nil {
		var t *guard.Trial
		if t, err = desiredTrial(recs, n.guard.Target(n.target.Path()), n.lkgPayload); err == nil {
			err = n.guard.Sync(t)
		}
	}
	if err != nil {
		n.log.Error("cannot keep the start guard's trial in step with the records", "err", err)
	}
}

// guardFallbackLocked records a fallback the guard made (while no agent
// ran, or between two of its looks): the trial it fell back from gets a
// late error, so that nothing writes it back, and the record goes. It runs
// at start and before anything that would write the file or prove the
// trial (a drift repair, a promotion, a health mark). A fault of the
// guard's directory is logged: it must not stop the agent.
func (n *Node) guardFallbackLocked() {
	if n.guard == nil {
		return
	}
	fb, err := guard.ReadFallback(n.guard.Dir)
	if err != nil {
		n.log.Error("the start guard's fallback record is unreadable; removed", "err", err)
		if err := guard.ClearFallback(n.guard.Dir, nil); err != nil {
			n.log.Error("cannot remove the start guard's fallback record", "err", err)
		}
		return
	}
	if fb == nil {
		return
	}
	recs, err := n.store.Records()
	if err != nil {
		n.log.Error("cannot read the records for the start guard's fallback", "err", err)
		return
	}
	if active := recs.GetActive().GetSource(); active != nil && trialIdentity(active) == fb.Identity && !proto.Equal(active, recs.GetLastKnownGood().GetSource()) {
		if _, err := n.rollBackLocked(records.ReasonStartGuardFellBack, fb.Message, active); err != nil {
			n.log.Error("cannot record the start guard's fallback", "err", err)
			return
		}
	}
	if err := guard.ClearFallback(n.guard.Dir, fb); err != nil {
		n.log.Error("cannot remove the start guard's fallback record", "err", err)
	}
}

// guardHealthyLocked tells the guard the kubelet runs src healthy, where
// src is the trial (active, not last-known-good). False when the guard
// already fell back from src: what runs healthy is last-known-good, and the
// fallback is recorded.
func (n *Node) guardHealthyLocked(src *nodeconfigv1.ConfigSource) bool {
	if n.guard == nil || src == nil {
		return true
	}
	recs, err := n.store.Records()
	if err != nil || !proto.Equal(recs.GetActive().GetSource(), src) || proto.Equal(recs.GetLastKnownGood().GetSource(), src) {
		return true
	}
	err = n.guard.MarkHealthy(trialIdentity(src))
	if errors.Is(err, guard.ErrFellBack) {
		n.guardFallbackLocked()
		return false
	}
	if err != nil {
		n.log.Error("cannot tell the start guard the kubelet is healthy", "err", err)
	}
	return true
}
