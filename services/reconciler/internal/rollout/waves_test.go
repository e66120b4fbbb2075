package rollout

import (
	"fmt"
	"slices"
	"testing"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/reconciler/internal/policy"
)

// Wave pacing: the nodes of nc over zones a (a1, a2), b (b1, b2), and
// u1 without the zone label.
var (
	zones     = map[string]string{"a1": "a", "a2": "a", "b1": "b", "b2": "b"}
	zoneNodes = []string{"b2", "u1", "a1", "b1", "a2"} // not in wave order: the order is the values'
	srcV0     = &nodeconfigv1.ConfigSource{Namespace: "ns", Name: "cfg", Uid: v1.UID, ResourceVersion: "9", Key: v1.Key}
	srcV1     = &nodeconfigv1.ConfigSource{Namespace: "ns", Name: "cfg", Uid: v1.UID, ResourceVersion: v1.ResourceVersion, Key: v1.Key}
	wantV1    = Want{Source: srcV1, Validator: nodeconfigv1.Validator_VALIDATOR_YAML}
)

// byZone is an Ask of every node seen, with waves by zone towards v1.
func byZone() Ask {
	return Ask{Seen: true, Selected: len(zoneNodes), Waves: &Waves{Values: zones, Selected: zoneNodes, Want: wantV1}}
}

// runs are the records of a node whose active and last-known-good config
// is src.
func runs(src *nodeconfigv1.ConfigSource) *nodeconfigv1.Records {
	return &nodeconfigv1.Records{Active: &nodeconfigv1.SourceRecord{Source: src}, LastKnownGood: &nodeconfigv1.SourceRecord{Source: src}}
}

// refusedV1 are the records of a node that rolled back from v1 to v0.
func refusedV1() *nodeconfigv1.Records {
	r := runs(srcV0)
	r.Assigned = assignedV1().Assigned
	r.Error = &nodeconfigv1.ErrorRecord{Error: &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE}}
	r.Failed = []*nodeconfigv1.FailedVersion{{Source: srcV1, Validator: nodeconfigv1.Validator_VALIDATOR_YAML}}
	return r
}

// zoneBook is a Book that saw every node of zoneNodes run v0.
func zoneBook() *Book {
	b := newBook()
	for _, n := range zoneNodes {
		b.Synced(n, Sync{Facts: Facts{State: active, NodeConfig: "nc", Records: runs(srcV0)}})
	}
	return b
}

// admit asks for node's trial of v1 with maxInTrial 3, and no halt.
func admit(t *testing.T, b *Book, node string, want policy.Admission) {
	t.Helper()
	nc := nodeConfig("nc", 3)
	never := int32(0)
	nc.Spec.Rollout.MaxFailures = &never
	if got := b.Admit(nc, node, v1, byZone()); got != want {
		t.Fatalf("admit %s: %v, want %v", node, got, want)
	}
}

// One zone at a time, in the values' order, within maxInTrial: zone b
// waits while a node of zone a may still take the version, even with
// places free, and starts once every node of zone a promoted it or
// rolled back from it; the unlabelled wave comes last.
func TestWavesGoOneValueAtATimeInOrder(t *testing.T) {
	b := zoneBook()
	admit(t, b, "b1", policy.Wait) // zone a first, though b1 asked first
	admit(t, b, "u1", policy.Wait)
	admit(t, b, "a1", policy.Admitted)
	admit(t, b, "a2", policy.Admitted)
	admit(t, b, "b1", policy.Wait) // a third place is free (maxInTrial 3), but zone a is on trial
	b.Synced("a1", Sync{Facts: Facts{State: active, NodeConfig: "nc", Records: runs(srcV1)}})
	admit(t, b, "b1", policy.Wait) // a2 still soaks
	b.Synced("a2", Sync{Facts: Facts{State: rolledBack, NodeConfig: "nc", Records: refusedV1()}})
	admit(t, b, "b1", policy.Admitted) // a2 refused v1: it takes no trial of it again
	admit(t, b, "u1", policy.Wait)     // a place is free, but zone b is on trial and b2 has not taken v1
	admit(t, b, "b2", policy.Admitted)
	for _, n := range []string{"b1", "b2"} {
		b.Synced(n, Sync{Facts: Facts{State: active, NodeConfig: "nc", Records: runs(srcV1)}})
	}
	admit(t, b, "u1", policy.Admitted)
}

// A node that fails before its trial starts is off its wave: the next
// wave starts without it. Healed, it takes its turn before the later
// waves start anything more, and only once no other wave is on trial.
func TestAFailedNodeLeavesItsWaveAndTakesItsTurnWhenHealed(t *testing.T) {
	b := zoneBook()
	admit(t, b, "a1", policy.Admitted)
	b.Synced("a1", Sync{Facts: Facts{State: active, NodeConfig: "nc", Records: runs(srcV1)}})
	b.Synced("a2", Sync{Facts: Facts{State: failing, NodeConfig: "nc", Records: runs(srcV0)}, Failed: true})
	admit(t, b, "b1", policy.Admitted)
	b.Synced("b1", Sync{Facts: Facts{State: soaking, NodeConfig: "nc", Records: runs(srcV0)}})
	// a2 heals: it waits while zone b is on trial, and goes before b2.
	b.Synced("a2", Sync{Facts: Facts{State: waiting, NodeConfig: "nc", Records: runs(srcV0)}})
	admit(t, b, "a2", policy.Wait)
	admit(t, b, "b2", policy.Wait)
	b.Synced("b1", Sync{Facts: Facts{State: active, NodeConfig: "nc", Records: runs(srcV1)}})
	admit(t, b, "a2", policy.Admitted)

	// A node failing once its trial started is on trial: it holds its wave.
	b = zoneBook()
	admit(t, b, "a1", policy.Admitted)
	admit(t, b, "a2", policy.Admitted)
	b.Synced("a1", Sync{Facts: Facts{State: active, NodeConfig: "nc", Records: runs(srcV1)}})
	mid := runs(srcV0)
	mid.Assigned = assignedV1().Assigned
	b.Synced("a2", Sync{Facts: Facts{State: failing, NodeConfig: "nc", Records: mid}, Failed: true})
	admit(t, b, "b1", policy.Wait)
}

// A node not synced yet, and a node's records the reconciler read before
// the new version, may still take it: their wave is not done.
func TestAWaveIsNotDoneWhileANodeMayStillTakeTheVersion(t *testing.T) {
	b := newBook()
	for _, n := range []string{"b1", "b2", "u1", "a2"} {
		b.Synced(n, Sync{Facts: Facts{State: active, NodeConfig: "nc", Records: runs(srcV0)}})
	}
	admit(t, b, "b1", policy.Wait) // a1 never synced
	b.Synced("a1", Sync{Facts: Facts{State: active, NodeConfig: "nc", Records: runs(srcV1)}})
	admit(t, b, "b1", policy.Wait) // a2 runs v0
	b.Synced("a2", Sync{Facts: Facts{State: nodeconfigv1.LifecycleState_LIFECYCLE_STATE_CONFLICT, NodeConfig: "nc", Records: runs(srcV0)}})
	admit(t, b, "b1", policy.Admitted) // another NodeConfig selects a2 too: nc leaves it be
}

// A node that runs the version under another name (an undo's revision,
// read from the ConfigMap version it still runs) needs no turn.
func TestAWaveIsDoneWithNodesThatRunTheVersionUnderAnotherName(t *testing.T) {
	b := zoneBook()
	rev := &nodeconfigv1.ConfigSource{Namespace: "ns", Name: "cfg", Uid: "uid-nc", ResourceVersion: "revision-1", Key: v1.Key}
	ask := byZone()
	ask.Waves.Want = Want{Source: rev, Validator: nodeconfigv1.Validator_VALIDATOR_YAML, Runs: []*nodeconfigv1.ConfigSource{srcV0}}
	if got := b.Admit(nodeConfig("nc", 3), "b1", VersionOf(rev, nodeconfigv1.Validator_VALIDATOR_YAML), ask); got != policy.Admitted {
		t.Fatalf("zone a runs the undo's revision as v0: b1 %v, want Admitted", got)
	}
}

// Resets go wave by wave too: a node leaving nc waits while a node of
// another wave is on nc's trial or resets, and while one of an earlier
// wave waits to reset.
func TestResetsGoWaveByWave(t *testing.T) {
	b := zoneBook()
	nc := nodeConfig("nc", 3)
	leaving := Ask{Seen: true, Selected: 0, Waves: &Waves{Values: zones}}
	admit(t, b, "a1", policy.Admitted)
	if got := b.Depart(nc, "b1", leaving); got != policy.Wait {
		t.Fatalf("b1 leaves while a1 of zone a is on trial: %v, want Wait", got)
	}
	if got := b.Depart(nc, "a2", leaving); got != policy.Admitted {
		t.Fatalf("a2 leaves beside a1 of its own zone: %v, want Admitted", got)
	}
	b.Synced("a1", Sync{Facts: Facts{State: active, NodeConfig: "nc", Records: runs(srcV1)}})
	if got := b.Depart(nc, "b1", leaving); got != policy.Wait {
		t.Fatalf("b1 leaves while a2 of zone a resets: %v, want Wait", got)
	}
	b.Synced("a2", Sync{Facts: Facts{State: nodeconfigv1.LifecycleState_LIFECYCLE_STATE_LOCAL_DEFAULT}})
	b.Synced("u1", Sync{Facts: Facts{State: waiting, NodeConfig: "nc"}})
	b.Depart(nc, "u1", Ask{Held: "Paused"}) // u1 waits to leave nc
	if got := b.Depart(nc, "b1", leaving); got != policy.Admitted {
		t.Fatalf("b1 leaves once zone a is done, u1 waiting behind it: %v, want Admitted", got)
	}
	if got := b.Depart(nc, "u1", leaving); got != policy.Wait {
		t.Fatalf("u1 leaves while b1 of zone b resets: %v, want Wait", got)
	}
}

// A freed place wakes the waiting nodes of the first wave that has any:
// those of a later wave would only be told to wait again.
func TestAFreedPlaceWakesTheFirstWaveWaiting(t *testing.T) {
	b := zoneBook()
	nc := nodeConfig("nc", 2)
	for _, n := range []string{"u1", "b2", "b1", "a2"} {
		setState(b, n, "nc", waiting)
	}
	w := &Waves{Values: zones}
	if got := b.Waking("nc", nc, len(zoneNodes), w); !slices.Equal(got, []string{"a2"}) {
		t.Fatalf("woke %v, want a2 (zone a)", got)
	}
	setState(b, "a2", "nc", active)
	got := b.Waking("nc", nc, len(zoneNodes), w)
	slices.Sort(got)
	if !slices.Equal(got, []string{"b1", "b2"}) {
		t.Fatalf("woke %v, want b1 and b2 (zone b, two places)", got)
	}
}

// The status's wave: the one on trial, else the first with a node still
// to take the version or to reset; none once all are done.
func TestCurrentWave(t *testing.T) {
	b := zoneBook()
	w := byZone().Waves
	if got, ok := b.CurrentWave("nc", w); !ok || got != "a" {
		t.Fatalf("before any trial: wave %q (%v), want a", got, ok)
	}
	for _, n := range []string{"a1", "a2"} {
		b.Synced(n, Sync{Facts: Facts{State: active, NodeConfig: "nc", Records: runs(srcV1)}})
	}
	if got, ok := b.CurrentWave("nc", w); !ok || got != "b" {
		t.Fatalf("zone a done: wave %q (%v), want b", got, ok)
	}
	b.Synced("u1", Sync{Facts: Facts{State: soaking, NodeConfig: "nc", Records: runs(srcV0)}}) // after a fail-over, say
	if got, ok := b.CurrentWave("nc", w); !ok || got != "" {
		t.Fatalf("u1 on trial: wave %q (%v), want the unlabelled one", got, ok)
	}
	for _, n := range []string{"b1", "b2", "u1"} {
		b.Synced(n, Sync{Facts: Facts{State: active, NodeConfig: "nc", Records: runs(srcV1)}})
	}
	if got, ok := b.CurrentWave("nc", w); ok {
		t.Fatalf("every wave done: wave %q, want none", got)
	}
}

// A NodeConfig that lets its nodes go (deleted, or without a source)
// waits for its selected nodes not reset yet too: a node of a later wave
// does not reset before them, whichever asks first.
func TestANodeConfigLettingItsNodesGoResetsThemWaveByWave(t *testing.T) {
	b := zoneBook()
	nc := nodeConfig("nc", 3)
	lets := Ask{Seen: true, Selected: len(zoneNodes), Waves: &Waves{Values: zones, Selected: zoneNodes}}
	for _, step := range []struct {
		node string
		want policy.Admission
	}{{"b1", policy.Wait}, {"a1", policy.Admitted}, {"a2", policy.Admitted}, {"b1", policy.Wait}} {
		if got := b.Depart(nc, step.node, lets); got != step.want {
			t.Fatalf("%s leaves: %v, want %v", step.node, got, step.want)
		}
	}
	for _, n := range []string{"a1", "a2"} {
		b.Synced(n, Sync{Facts: Facts{State: nodeconfigv1.LifecycleState_LIFECYCLE_STATE_LOCAL_DEFAULT, Records: &nodeconfigv1.Records{}}})
	}
	if got := b.Depart(nc, "b1", lets); got != policy.Admitted {
		t.Fatalf("b1 leaves once zone a reset: %v, want Admitted", got)
	}
}

// An admission with waves reads every selected node's last state: the
// worst case is a node of the last wave, every earlier one done.
func BenchmarkAdmitLastWaveOf5000Nodes(b *testing.B) {
	const n, zoneCount = 5000, 3
	book := newBook()
	values := map[string]string{}
	var selected []string
	for i := range n {
		name := fmt.Sprintf("node-%d", i)
		values[name] = fmt.Sprintf("zone-%d", i%zoneCount)
		selected = append(selected, name)
		recs := runs(srcV1)
		if i%zoneCount == zoneCount-1 {
			recs = runs(srcV0)
		}
		book.Synced(name, Sync{Facts: Facts{State: active, NodeConfig: "nc", Records: recs}})
	}
	nc := nodeConfig("nc", 10)
	ask := Ask{Seen: true, Selected: n, Waves: &Waves{Values: values, Selected: selected, Want: wantV1}}
	asking := fmt.Sprintf("node-%d", zoneCount-1)
	for b.Loop() {
		if got := book.Admit(nc, asking, v1, ask); got != policy.Admitted {
			b.Fatalf("admit: %v", got)
		}
		book.Synced(asking, Sync{Facts: Facts{State: active, NodeConfig: "nc", Records: runs(srcV0)}})
	}
}
