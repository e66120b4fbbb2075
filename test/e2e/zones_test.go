package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/framework/sim"
)

const zoneLabel = "topology.kubernetes.io/zone"

// Zone waves: nine nodes over three zones, maxInTrial 2, topologyKey the
// zone label. From the nodes' own records (each node's checkpointd: its
// trial runs from its assigned record's write to its last-known-good's),
// no two zones ever had a node on trial at once, each zone was done (all
// promoted) before the next began, in the zones' order, and no more than
// two trials overlapped. The zones are spread over the node names, so the
// waves' order is not the nodes'.
func TestZoneWavesOneZoneAtATimeByTheNodesRecords(t *testing.T) {
	zones := []string{"zone-a", "zone-b", "zone-c"}
	zoneOf := func(i int) string { return zones[(2*i+2)%3] } // c, a, b, c, a, ...
	e := newNodes(t, 9, func(i int) sim.NodeOptions { return sim.NodeOptions{Labels: map[string]string{zoneLabel: zoneOf(i)}} })
	e.startReconciler("r0")
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(1), "rollout": map[string]any{"maxInTrial": int64(2), "topologyKey": zoneLabel}})

	// What the NodeConfig says on the way, for the log: its status is
	// coalesced, so a wave may pass between two reads.
	var said []string
	recs := make([]*nodeconfigv1.Records, len(e.nodes))
	err := proc.WaitFor(120*time.Second, func() (bool, error) {
		if nc, err := e.nodeConfigNow(e.label); err == nil {
			if p := meta.FindStatusCondition(nc.Status.Conditions, v1alpha1.ConditionProgressing); p != nil && !slices.Contains(said, p.Message) {
				said = append(said, p.Message)
			}
		}
		done := 0
		for i := range e.nodes {
			recs[i] = e.records(i)
			if recs[i].GetLastKnownGood().GetSource().GetResourceVersion() == cm.ResourceVersion {
				done++
			}
		}
		return done == len(e.nodes), fmt.Errorf("%d of %d promoted", done, len(e.nodes))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Progressing said, in turn:\n  %s", strings.Join(said, "\n  "))
	e.waitAllPromoted(cm.ResourceVersion) // and each Node says so

	byZone := map[string][]zoneTrial{}
	for i, r := range recs {
		if a := r.GetAssigned(); a.GetSource().GetResourceVersion() != cm.ResourceVersion || a.GetNodeConfig() != e.label {
			t.Fatalf("node %s's assigned record %v: want %s assigned by %s", e.nodes[i].Name, a, cm.ResourceVersion, e.label)
		}
		byZone[zoneOf(i)] = append(byZone[zoneOf(i)], zoneTrial{e.nodes[i].Name, r.GetAssigned().GetWrittenAt().AsTime(), r.GetLastKnownGood().GetWrittenAt().AsTime()})
	}
	for _, z := range zones {
		t.Logf("%s: %v", z, byZone[z])
	}
	for zi, z := range zones {
		for _, other := range zones[zi+1:] {
			for _, a := range byZone[z] {
				for _, b := range byZone[other] {
					if a.from.Before(b.to) && b.from.Before(a.to) {
						t.Errorf("%v of %s and %v of %s were on trial at once", a, z, b, other)
					}
				}
			}
		}
		if zi == 0 {
			continue
		}
		prev := zones[zi-1]
		prevDone := slices.MaxFunc(byZone[prev], func(a, b zoneTrial) int { return a.to.Compare(b.to) }).to
		began := slices.MinFunc(byZone[z], func(a, b zoneTrial) int { return a.from.Compare(b.from) }).from
		if began.Before(prevDone) {
			t.Errorf("%s began at %s, before %s was done (its last promotion at %s)", z, began.Format(time.StampMicro), prev, prevDone.Format(time.StampMicro))
		}
	}
	if most := mostTrialsAtOnce(recs); most > 2 {
		t.Errorf("%d trials overlapped (assigned to last-known-good, from the nodes' records); maxInTrial is 2", most)
	}
	nc := e.waitNodeConfig(e.label, 20*time.Second, "Ready, every wave done", func(nc *v1alpha1.NodeConfig) bool {
		return meta.IsStatusConditionTrue(nc.Status.Conditions, v1alpha1.ConditionReady) && nc.Status.Waves != nil && nc.Status.Waves.Current == 0
	})
	if w := nc.Status.Waves; !slices.Equal(w.Order, zones) || w.Count != 3 || w.TopologyKey != zoneLabel {
		t.Errorf("status.waves %+v, want the order %v by %s", w, zones, zoneLabel)
	}
}

// zoneTrial is one node's trial, by its records: from its assigned
// record's write to its last-known-good's.
type zoneTrial struct {
	node     string
	from, to time.Time
}

func (tr zoneTrial) String() string {
	return fmt.Sprintf("%s %s to %s", tr.node, tr.from.Format("15:04:05.000"), tr.to.Format("15:04:05.000"))
}

// A topologyKey that no node has: every node is in one wave (those
// without the label), the rollout completes paced by maxInTrial alone,
// and the NodeConfig's status says so, also once complete.
func TestUnknownTopologyKeyIsOneWaveAndTheStatusSaysSo(t *testing.T) {
	e := newEnv(t, 3)
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(1), "rollout": map[string]any{"maxInTrial": int64(2), "topologyKey": "example.com/no-such-label"}})
	e.waitAllPromoted(cm.ResourceVersion)
	const says = "spec.rollout.topologyKey example.com/no-such-label: no selected node has this label, so all 3 are one wave"
	nc := e.waitNodeConfig(e.label, 20*time.Second, "Ready, saying the key selects one wave", func(nc *v1alpha1.NodeConfig) bool {
		p := meta.FindStatusCondition(nc.Status.Conditions, v1alpha1.ConditionProgressing)
		return meta.IsStatusConditionTrue(nc.Status.Conditions, v1alpha1.ConditionReady) && p != nil && strings.Contains(p.Message, says)
	})
	if w := nc.Status.Waves; w == nil || !slices.Equal(w.Order, []string{""}) || w.Count != 1 || w.Current != 0 {
		t.Errorf("status.waves %+v, want one wave, of the nodes without the label, done", w)
	}
	e.waitNodeConfigCondition(e.label, "Ready", metav1.ConditionTrue, "AllNodesActive", 20*time.Second)
}
