package rollout

import (
	"iter"
	"maps"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/reconciler/internal/pacing"
	"nodeconfig.io/services/reconciler/internal/policy"
)

// A NodeConfig with a topologyKey rolls out in waves, one per value of
// that node label (pacing.WaveOrder), within maxInTrial:
//
//   - a node starts a trial, or a reset, only while every node on the
//     NodeConfig's trial (trials and resets alike) is of its own wave: one
//     wave at a time;
//   - and only once no node of an earlier wave still has its turn to take:
//     a selected node not done with the version (with no version, the
//     local default: a NodeConfig that lets its nodes go), or a departing
//     node not reset yet.
//
// A selected node is done with the version once it promoted it (or runs
// it under another name), rolled back from it (it never takes it again),
// failed before its trial started (off its wave: nothing unproven runs on
// it, and a node that may never heal must not stall every later wave), or
// is left alone (another NodeConfig selects it too). A failed node that
// heals takes its turn as a late one: once no other wave is on trial,
// before the later waves start anything more. A halted version stops
// every wave (admission says Halted before it asks about waves); its undo
// goes wave by wave as any rollout.

// Waves is what wave pacing reads beyond the Book.
type Waves struct {
	// Values maps nodes to their value of the topologyKey; a node without
	// the label is absent (pacing.Unlabelled).
	Values map[string]string
	// Selected names the nodes whose turns are waited for beside the
	// departing ones: those the NodeConfig selects, towards Want.
	Selected []string
	// Want is what a selected node is done with once it runs it or
	// refused it.
	Want Want
}

// Want is the version a NodeConfig's nodes are to run; with no Source,
// their local default.
type Want struct {
	Source    *nodeconfigv1.ConfigSource
	Validator nodeconfigv1.Validator
	// Runs are other names of Source's bytes (policy.Desired.Runs).
	Runs []*nodeconfigv1.ConfigSource
}

// waitsForAnotherWaveLocked says whether node must wait for another wave
// of ncName: one on trial, or an earlier one with a node still to take
// its turn.
func (b *Book) waitsForAnotherWaveLocked(ncName, node string, w *Waves) bool {
	own := w.Values[node]
	for other := range b.inTrialLocked(ncName) {
		if other != node && w.Values[other] != own {
			return true
		}
	}
	earlier := func(v string) bool { return pacing.WaveBefore(v, own) }
	for other := range b.turnsLeftLocked(ncName, w, earlier) {
		if other != node {
			return true
		}
	}
	return false
}

// inTrialLocked yields the nodes on ncName's trial: its trials and the
// departures that hold a place in it.
func (b *Book) inTrialLocked(ncName string) iter.Seq[string] {
	return func(yield func(string) bool) {
		if t := b.trials[ncName]; t != nil {
			for n := range t.onTrial {
				if !yield(n) {
					return
				}
			}
		}
		for n := range b.departing[ncName] {
			if b.departureInTrialLocked(n) && !yield(n) {
				return
			}
		}
	}
}

// turnsLeftLocked yields the nodes of ncName in the waves of values
// that in accepts still to take their turn: departing nodes not reset
// yet, and w.Selected not done with w.Want. The wave is asked first: it
// is the cheaper question.
func (b *Book) turnsLeftLocked(ncName string, w *Waves, in func(value string) bool) iter.Seq[string] {
	return func(yield func(string) bool) {
		for n := range b.departing[ncName] {
			if in(w.Values[n]) && !b.departureInTrialLocked(n) && !yield(n) {
				return
			}
		}
		for _, n := range w.Selected {
			if in(w.Values[n]) && !b.doneLocked(n, w.Want) && !yield(n) {
				return
			}
		}
	}
}

// departureInTrialLocked says whether a departing node's reset holds its
// place: admitted, or soaking.
func (b *Book) departureInTrialLocked(node string) bool {
	s := b.seats[node]
	return s != nil && (s.admitted || records.ResetSoaking(s.Records, b.now()))
}

// doneLocked says whether a selected node is done with want, by its last
// sync; one never synced is not.
func (b *Book) doneLocked(node string, want Want) bool {
	s := b.seats[node]
	if s == nil {
		return false
	}
	switch s.State {
	case nodeconfigv1.LifecycleState_LIFECYCLE_STATE_CONFLICT:
		return true
	case nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING:
		if !trialOnNode(s.Records) {
			return true
		}
	}
	recs := s.Records
	if want.Source == nil {
		return recs.GetAssigned() == nil && recs.GetActive() == nil
	}
	return records.SameSource(recs.GetLastKnownGood().GetSource(), want.Source) || policy.RunsOneOf(recs, want.Runs...) ||
		records.FailedLate(recs, want.Source, want.Validator) != nil
}

// CurrentWave is the value of ncName's wave under way: the one on trial
// (the first, should nodes of several be after a relabel), else the first
// with a node still to take its turn; ok is false when there is none.
func (b *Book) CurrentWave(ncName string, w *Waves) (value string, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if value, ok = firstWave(w, b.inTrialLocked(ncName)); ok {
		return value, ok
	}
	return firstWave(w, b.turnsLeftLocked(ncName, w, func(string) bool { return true }))
}

// firstWave is the value of the first wave that has one of nodes; ok is
// false for no nodes.
func firstWave(w *Waves, nodes iter.Seq[string]) (value string, ok bool) {
	for n := range nodes {
		if v := w.Values[n]; !ok || pacing.WaveBefore(v, value) {
			value, ok = v, true
		}
	}
	return value, ok
}

// firstWaveWaitingLocked keeps, of the nodes waiting on ncName, those of
// the first wave that has any.
func (b *Book) firstWaveWaitingLocked(ncName string, w *Waves) set {
	first, _ := firstWave(w, maps.Keys(b.waiting[ncName]))
	out := set{}
	for n := range b.waiting[ncName] {
		if w.Values[n] == first {
			out[n] = struct{}{}
		}
	}
	return out
}
