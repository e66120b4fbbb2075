package controller

import (
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
)

const zoneKey = "topology.kubernetes.io/zone"

// zoneFixture is nodes of pool a over zones a and b and one without the
// zone label, and NodeConfig nc by zone with maxInTrial 3 (more than a
// zone's nodes), nothing synced yet. The nodes are listed against the
// waves' order, and synced in that order.
func zoneFixture(t *testing.T) (*fixture, map[string]*fakeAgent, []string) {
	t.Helper()
	f := newFixture(t)
	nodes := []string{"u1", "b2", "b1", "a2", "a1"}
	agents := map[string]*fakeAgent{}
	for _, n := range nodes {
		labels := map[string]string{"pool": "a"}
		if n[0] != 'u' {
			labels[zoneKey] = n[:1]
		}
		agents[n] = f.addNode(n, labels)
	}
	f.addConfigMap("ns", "cfg", "10", map[string]string{"k": "maxPods: 1\n"})
	three := intstr.FromInt32(3)
	f.setNodeConfig(poolA("nc", v1alpha1.Rollout{MaxInTrial: &three, TopologyKey: zoneKey}))
	return f, agents, nodes
}

// zonesOnTrial lists the zones of the nodes soaking now ("" for none).
func zonesOnTrial(f *fixture, nodes []string) []string {
	var zones []string
	for _, n := range nodes {
		if z := strings.TrimRight(n[:1], "u"); f.state(n) == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING && !slices.Contains(zones, z) {
			zones = append(zones, z)
		}
	}
	return zones
}

// The waves go zone a, zone b, then the nodes without the label, one at
// a time though maxInTrial has places for more, and the NodeConfig's
// status says which is under way.
func TestZoneWavesRollOutOneZoneAtATime(t *testing.T) {
	f, agents, nodes := zoneFixture(t)
	f.syncAll(nodes...) // every node seen
	for i, want := range []struct {
		soaking []string
		current int32
		says    string
	}{
		{[]string{"a1", "a2"}, 1, "wave 1 of 3: topology.kubernetes.io/zone=a"},
		{[]string{"b1", "b2"}, 2, "wave 2 of 3: topology.kubernetes.io/zone=b"},
		{[]string{"u1"}, 3, "wave 3 of 3: the nodes without topology.kubernetes.io/zone"},
	} {
		f.syncAll(nodes...) // the soaks that ended promote, and free their places
		f.syncAll(nodes...)
		var soaking []string
		for _, n := range nodes {
			if f.state(n) == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING {
				soaking = append(soaking, n)
			}
		}
		slices.Sort(soaking)
		if !slices.Equal(soaking, want.soaking) {
			t.Fatalf("wave %d: soaking %v (%s), want %v", i+1, soaking, states(f.c, nodes...), want.soaking)
		}
		if zones := zonesOnTrial(f, nodes); len(zones) != 1 {
			t.Fatalf("wave %d: zones %v on trial at once", i+1, zones)
		}
		p := f.condition("nc", v1alpha1.ConditionProgressing)
		w := f.storedNodeConfig("nc").Status.Waves
		if w == nil || !slices.Equal(w.Order, []string{"a", "b", ""}) || w.Count != 3 || w.Current != want.current || w.TopologyKey != zoneKey {
			t.Fatalf("wave %d: status.waves %+v, want order [a b \"\"], count 3, current %d", i+1, w, want.current)
		}
		if !strings.Contains(p.Message, want.says) {
			t.Fatalf("wave %d: Progressing says %q, want %q in it", i+1, p.Message, want.says)
		}
		f.now = f.now.Add(61 * time.Second)
	}
	f.syncAll(nodes...)
	if got := assigned(agents, nodes...); len(got) != len(nodes) {
		t.Fatalf("assigned %v, want every node", got)
	}
	if r := f.condition("nc", v1alpha1.ConditionReady); r.Reason != v1alpha1.ReasonAllNodesActive {
		t.Fatalf("Ready %s: %s, want AllNodesActive", r.Reason, r.Message)
	}
	if w := f.storedNodeConfig("nc").Status.Waves; w.Current != 0 {
		t.Fatalf("every wave done: current %d, want 0", w.Current)
	}
}

// A topologyKey no selected node has puts them all in one wave (the
// nodes without the label), paced by maxInTrial alone, and the status
// says so, also once the rollout is complete.
func TestUnknownTopologyKeyIsOneWaveAndSaysSo(t *testing.T) {
	f, _ := trialFixture(t, v1alpha1.Rollout{})
	two := intstr.FromInt32(2)
	f.setNodeConfig(poolA("nc", v1alpha1.Rollout{MaxInTrial: &two, TopologyKey: "example.com/no-such-label"}))
	f.syncAll(poolANodes...)
	f.syncAll(poolANodes...)
	soaking := 0
	for _, n := range poolANodes {
		if f.state(n) == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING {
			soaking++
		}
	}
	if soaking != 2 {
		t.Fatalf("%d soaking (%s), want 2: maxInTrial alone paces one wave", soaking, states(f.c, poolANodes...))
	}
	const says = "spec.rollout.topologyKey example.com/no-such-label: no selected node has this label, so all 3 are one wave"
	if p := f.condition("nc", v1alpha1.ConditionProgressing); !strings.Contains(p.Message, says) {
		t.Fatalf("Progressing says %q, want %q in it", p.Message, says)
	}
	if w := f.storedNodeConfig("nc").Status.Waves; w == nil || !slices.Equal(w.Order, []string{""}) || w.Count != 1 || w.Current != 1 {
		t.Fatalf("status.waves %+v, want one wave, the nodes without the label, under way", w)
	}
	for range 3 {
		f.now = f.now.Add(61 * time.Second)
		f.syncAll(poolANodes...)
	}
	if r := f.condition("nc", v1alpha1.ConditionReady); r.Reason != v1alpha1.ReasonAllNodesActive {
		t.Fatalf("Ready %s: %s, want AllNodesActive", r.Reason, r.Message)
	}
	if p := f.condition("nc", v1alpha1.ConditionProgressing); !strings.Contains(p.Message, says) {
		t.Fatalf("complete, Progressing says %q, want %q in it still", p.Message, says)
	}
}

// Deleting the NodeConfig resets its nodes wave by wave too: each reset
// holds its place for the NodeConfig's soak, and the next zone resets
// only once it ended.
func TestResetsOfADeletedNodeConfigGoWaveByWave(t *testing.T) {
	f, agents, nodes := zoneFixture(t)
	for range 8 {
		f.syncAll(nodes...)
		f.now = f.now.Add(61 * time.Second)
	}
	f.syncAll(nodes...)
	if got := assigned(agents, nodes...); len(got) != len(nodes) {
		t.Fatalf("setup: assigned %v (%s), want every node", got, states(f.c, nodes...))
	}
	nc, err := f.c.o.NodeConfigs.Get("nc")
	if err != nil {
		t.Fatal(err)
	}
	f.deleting(nc.DeepCopy())
	for _, want := range [][]string{{"a1", "a2"}, {"a1", "a2", "b1", "b2"}, {"a1", "a2", "b1", "b2", "u1"}} {
		f.syncAll(nodes...)
		f.syncAll(nodes...)
		var reset []string
		for _, n := range nodes {
			if agents[n].records().GetLastReset() != nil {
				reset = append(reset, n)
			}
		}
		slices.Sort(reset)
		if !slices.Equal(reset, want) {
			t.Fatalf("reset %v, want %v", reset, want)
		}
		f.now = f.now.Add(61 * time.Second)
	}
}
