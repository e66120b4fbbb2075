package rollout

import (
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/pacing"
	"nodeconfig.io/services/reconciler/internal/policy"
)

// Ask is what admission needs to know beyond the Book: what the caller
// read from its caches just before asking.
type Ask struct {
	// Seen says every node was synced since the start (but the one
	// asking): one not seen yet may be soaking a change.
	Seen bool
	// Selected counts the nodes the NodeConfig selects.
	Selected int
	// Held is the Hold's reason ("" for none).
	Held string
	// Waves, for a NodeConfig with a topologyKey, paces its waves
	// (waves.go); nil: one wave of every node.
	Waves *Waves
}

// Admit applies nc's rollout limits to one node starting a trial of
// version v. The count and the reservation happen under one lock, so two
// workers can never both take the last place in the trial.
func (b *Book) Admit(nc *v1alpha1.NodeConfig, node string, v Version, ask Ask) policy.Admission {
	b.mu.Lock()
	defer b.mu.Unlock()
	// Counted before the wait for unseen nodes: a halt is durable and
	// holds whatever the nodes not seen yet say.
	if pacing.Halted(b.haltCountLocked(nc, v), b.policyLocked(nc).MaxFailures) {
		return policy.Halted
	}
	if ask.Held != "" || b.waitsForUnseenLocked(nc, ask) {
		return policy.Wait
	}
	if b.freePlacesLocked(nc, ask.Selected, node) <= 0 {
		return policy.Wait
	}
	if ask.Waves != nil && b.waitsForAnotherWaveLocked(nc.Name, node, ask.Waves) {
		return policy.Wait
	}
	s := b.seatLocked(node)
	s.admitted, s.admittedFor = true, nc.Name
	b.reindexLocked(node, s)
	return policy.Admitted
}

// waitsForUnseenLocked says a node of nc waits for the nodes not synced
// since this reconciler started: one of them may be soaking a reset that
// left nc and takes a place in its trial. A trial of every node in one
// wave has a place for it anyway, so its nodes start at their first sync
// (a new leader's first pass) instead of a second pass once all are seen.
func (b *Book) waitsForUnseenLocked(nc *v1alpha1.NodeConfig, ask Ask) bool {
	return !ask.Seen && (ask.Waves != nil || !b.policyLocked(nc).TakesEveryNode())
}

// freePlacesLocked is how many more nodes nc's trial takes, not counting
// except ("" for none) among those in it. Nodes leaving nc share its trial
// (see depart.go), so its limit is a share of them and of the selected
// nodes.
func (b *Book) freePlacesLocked(nc *v1alpha1.NodeConfig, selected int, except string) int {
	total := selected + len(b.departing[nc.Name])
	if Lets(nc) {
		// Its departing nodes are among those it selects.
		total = selected
	}
	limit := b.policyLocked(nc).MaxInTrial(total)
	return limit - b.departuresInTrialLocked(nc.Name, except) - b.onTrialLocked(nc.Name, except)
}

// onTrialLocked counts nc's nodes on trial, except one.
func (b *Book) onTrialLocked(nc, except string) int {
	t := b.trials[nc]
	if t == nil {
		return 0
	}
	n := len(t.onTrial)
	if _, ok := t.onTrial[except]; ok {
		n--
	}
	return n
}

// Waking names the nodes pacing held back on ncName that its trial now
// has places for (any of them: the one that syncs first takes a place);
// nc is nil when the NodeConfig is gone, and then all of them wake. Each
// woken node asks its agent, so waking every waiting node for each freed
// place would cost thousands of syncs per place in a large paced rollout;
// the nodes left waiting look again on the next freed place or their own
// requeue. With waves (w not nil), only the first wave that has waiting
// nodes wakes: a later one would be told to wait again.
func (b *Book) Waking(ncName string, nc *v1alpha1.NodeConfig, selected int, w *Waves) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	candidates := b.waiting[ncName]
	if w != nil {
		candidates = b.firstWaveWaitingLocked(ncName, w)
	}
	free := len(candidates)
	if nc != nil {
		free = b.freePlacesLocked(nc, selected, "")
	}
	waking := make([]string, 0, max(0, min(free, len(candidates))))
	for name := range candidates {
		if len(waking) >= free {
			break
		}
		waking = append(waking, name)
	}
	return waking
}
