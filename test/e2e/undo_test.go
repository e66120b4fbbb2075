package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/framework/sim"
)

// A version that halts is undone (spec.rollout.onHalt defaults to Undo):
// every node that promoted it goes back to the revision before it, paced
// by maxInTrial 3 (from the nodes' own records), through a leader
// fail-over mid-undo; no node promotes the halted version after the halt,
// and the nodes that never took it are not touched.
func TestAHaltedVersionIsUndoneThroughAFailover(t *testing.T) {
	const nodes = 10
	base := kubeletHeader + "failCgroupV1: false\n"
	e := newNodes(t, nodes, func(int) sim.NodeOptions {
		return sim.NodeOptions{KubeletConfig: base, CheckpointdArgs: []string{"--kubelet-files-period", "200ms"}}
	})
	t.Cleanup(e.deleteHistory)
	e.startReconciler("r0")
	// v2 lowers the image GC high threshold below what the refusing nodes'
	// base config will put the low one at; v1 stays above it.
	v1YAML, v2YAML := kubeletHeader+"maxPods: 57\nimageGCHighThresholdPercent: 95\n", kubeletHeader+"imageGCHighThresholdPercent: 90\n"
	v1 := e.configMap("cfg", map[string]string{"config.yaml": v1YAML})
	spec := map[string]any{"soakSeconds": int64(2), "validator": "kubelet", "rollout": map[string]any{"maxInTrial": int64(3), "maxFailures": int64(3)}}
	e.use(e.label, "cfg", spec)
	e.waitAllPromoted(v1.ResourceVersion)
	e.waitHistory("revision 1 promoted", func(h pluginHistory) bool {
		return len(h.Revisions) == 1 && h.Revisions[0].Outcome == v1alpha1.OutcomePromoted
	})

	v2 := e.configMap("cfg", map[string]string{"config.yaml": v2YAML})
	// Once three nodes promoted v2 the rollout pauses, and three nodes not
	// admitted to it get a base config the kubelet would refuse v2 over:
	// resumed, each rolls back when it is admitted, and the third rollback
	// halts v2.
	err := proc.WaitFor(60*time.Second, func() (bool, error) {
		promoted := 0
		for i := range e.nodes {
			if e.records(i).GetLastKnownGood().GetSource().GetResourceVersion() == v2.ResourceVersion {
				promoted++
			}
		}
		return promoted >= 3, fmt.Errorf("%d nodes promoted v2", promoted)
	})
	if err != nil {
		t.Fatal(err)
	}
	paused := map[string]any{"maxInTrial": int64(3), "maxFailures": int64(3), "paused": true}
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(2), "validator": "kubelet", "rollout": paused})
	e.waitNodeConfigCondition(e.label, "Progressing", metav1.ConditionFalse, v1alpha1.ReasonPaused, 30*time.Second)
	var refusing []int
	for i, n := range e.nodes {
		if len(refusing) < 3 && e.records(i).GetAssigned().GetSource().GetResourceVersion() != v2.ResourceVersion {
			if err := os.WriteFile(filepath.Join(n.Dir, "kubelet-config.yaml"), []byte(base+"imageGCLowThresholdPercent: 92\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			refusing = append(refusing, i)
		}
	}
	if len(refusing) < 3 {
		t.Fatalf("only %d nodes were not admitted to v2 when the rollout paused; want three to refuse it", len(refusing))
	}
	e.use(e.label, "cfg", spec)

	// promotedAt is when each node made v2 its last-known-good, sampled
	// from the nodes' records until the undo ends (it overwrites it).
	promotedAt := map[int]time.Time{}
	sample := func() {
		for i := range e.nodes {
			if lkg := e.records(i).GetLastKnownGood(); lkg.GetSource().GetResourceVersion() == v2.ResourceVersion {
				promotedAt[i] = lkg.GetWrittenAt().AsTime()
			}
		}
	}
	if err := proc.WaitFor(60*time.Second, func() (bool, error) {
		sample()
		nc, err := e.nodeConfigNow(e.label)
		if err != nil {
			return false, err
		}
		d := meta.FindStatusCondition(nc.Status.Conditions, "Degraded")
		return d != nil && d.Reason == "RolloutHalted", fmt.Errorf("Degraded %+v", d)
	}); err != nil {
		t.Fatal(err)
	}
	haltSeen := time.Now()
	if len(promotedAt) < 3 {
		t.Fatalf("%d nodes promoted v2 before the halt; want at least the three before the pause", len(promotedAt))
	}

	// Mid-undo, the leader goes; a new one finishes from what the API and
	// the nodes say.
	onRevision1 := func(i int) bool {
		r := e.records(i)
		return r.GetLastKnownGood().GetSource().GetResourceVersion() == "revision-1" && r.GetActive().GetSource().GetResourceVersion() == "revision-1"
	}
	if err := proc.WaitFor(60*time.Second, func() (bool, error) {
		sample()
		for i := range e.nodes {
			if onRevision1(i) {
				return true, nil
			}
		}
		return false, fmt.Errorf("no node back on revision 1")
	}); err != nil {
		t.Fatal(err)
	}
	e.reconciler.Close()
	e.reconciler = nil
	e.startReconciler("r1")
	if err := proc.WaitFor(90*time.Second, func() (bool, error) {
		sample()
		nc, err := e.nodeConfigNow(e.label)
		if err != nil {
			return false, err
		}
		p := meta.FindStatusCondition(nc.Status.Conditions, "Progressing")
		return p != nil && p.Reason == v1alpha1.ReasonHaltedVersionUndone, fmt.Errorf("Progressing %+v", p)
	}); err != nil {
		t.Fatal(err)
	}

	// Each node's own store and records say what it went through: a
	// checkpoint of v2 means it was admitted to v2; the refusing nodes
	// rolled it back; every other admitted node ran it, and runs revision
	// 1 (v1's bytes, in its file) again; the rest never moved off v1.
	var undone []*nodeconfigv1.Records
	for i, n := range e.nodes {
		list, err := n.Checkpoint().ListCheckpoints(e.ctx, &nodeconfigv1.ListCheckpointsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		admitted := slices.ContainsFunc(list.GetCheckpoints(), func(cp *nodeconfigv1.CheckpointInfo) bool {
			return cp.GetSource().GetResourceVersion() == v2.ResourceVersion
		})
		r := e.records(i)
		file, _ := n.Target()
		switch {
		case slices.Contains(refusing, i):
			if r.GetActive().GetSource().GetResourceVersion() != v1.ResourceVersion || r.GetError().GetError().GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE {
				t.Errorf("refusing node %s: active %v, error %v; want v1 kept after rolling v2 back", n.Name, r.GetActive().GetSource(), r.GetError())
			}
		case admitted:
			undone = append(undone, r)
			if !onRevision1(i) || file != v1YAML {
				t.Errorf("node %s took v2: active %v, last-known-good %v, file %q; want revision 1 and v1's bytes", n.Name, r.GetActive().GetSource(), r.GetLastKnownGood().GetSource(), file)
			}
		default:
			if r.GetAssigned().GetSource().GetResourceVersion() != v1.ResourceVersion || r.GetLastKnownGood().GetSource().GetResourceVersion() != v1.ResourceVersion {
				t.Errorf("node %s never took v2: assigned %v, last-known-good %v; want v1 untouched", n.Name, r.GetAssigned().GetSource(), r.GetLastKnownGood().GetSource())
			}
		}
	}
	if len(undone) < 3 {
		t.Fatalf("%d nodes took v2 and were undone; want at least the three promoted before the pause", len(undone))
	}
	if most := mostTrialsAtOnce(undone); most > 3 {
		t.Fatalf("%d undo trials overlapped (assigned to last-known-good, from the nodes' records); maxInTrial is 3", most)
	}
	for i, at := range promotedAt {
		if at.After(haltSeen) {
			t.Fatalf("node %s promoted v2 at %s, after the NodeConfig said it halted (%s)", e.nodes[i].Name, at, haltSeen)
		}
	}
	e.waitHistory("revision 2 halted", func(h pluginHistory) bool {
		return len(h.Revisions) == 2 && h.Revisions[1].Outcome == v1alpha1.OutcomeHalted
	})
}
