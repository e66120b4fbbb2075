package e2e

import (
	"fmt"
	"os"
	"path/filepath"
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
	refusing := 0
	for i, n := range e.nodes {
		if refusing < 3 && e.records(i).GetAssigned().GetSource().GetResourceVersion() != v2.ResourceVersion {
			if err := os.WriteFile(filepath.Join(n.Dir, "kubelet-config.yaml"), []byte(base+"imageGCLowThresholdPercent: 92\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			refusing++
		}
	}
	if refusing < 3 {
		t.Fatalf("only %d nodes were not admitted to v2 when the rollout paused; want three to refuse it", refusing)
	}
	e.use(e.label, "cfg", spec)
	e.waitNodeConfigCondition(e.label, "Degraded", metav1.ConditionTrue, "RolloutHalted", 60*time.Second)
	nc, err := e.nodeConfigNow(e.label)
	if err != nil {
		t.Fatal(err)
	}
	halted := meta.FindStatusCondition(nc.Status.Conditions, "Degraded")

	// The nodes that took v2 (last-known-good), read from their records at
	// the halt.
	var took []int
	promotedAt := map[int]time.Time{}
	for i := range e.nodes {
		if lkg := e.records(i).GetLastKnownGood(); lkg.GetSource().GetResourceVersion() == v2.ResourceVersion {
			took = append(took, i)
			promotedAt[i] = lkg.GetWrittenAt().AsTime()
		}
	}
	if len(took) < 4 {
		t.Fatalf("%d nodes had v2 as last-known-good at the halt; want at least the four that promoted it", len(took))
	}

	// Mid-undo, the leader goes; a new one finishes from what the API and
	// the nodes say.
	undone := func() int {
		back := 0
		for _, i := range took {
			if r := e.records(i); r.GetLastKnownGood().GetSource().GetResourceVersion() == "revision-1" && r.GetActive().GetSource().GetResourceVersion() == "revision-1" {
				back++
			}
		}
		return back
	}
	if err := proc.WaitFor(60*time.Second, func() (bool, error) {
		return undone() >= 1, fmt.Errorf("%d of %d nodes back on revision 1", undone(), len(took))
	}); err != nil {
		t.Fatal(err)
	}
	if undone() == len(took) {
		t.Logf("the undo finished before the fail-over")
	}
	e.reconciler.Close()
	e.reconciler = nil
	e.startReconciler("r1")

	var recs []*nodeconfigv1.Records
	err = proc.WaitFor(90*time.Second, func() (bool, error) {
		recs = recs[:0]
		done := 0
		for _, i := range took {
			r := e.records(i)
			recs = append(recs, r)
			file, _ := e.nodes[i].Target()
			if r.GetLastKnownGood().GetSource().GetResourceVersion() == "revision-1" && r.GetActive().GetSource().GetResourceVersion() == "revision-1" && file == v1YAML {
				done++
			}
		}
		return done == len(took), fmt.Errorf("%d of %d nodes that took v2 run revision 1 (v1's bytes) again", done, len(took))
	})
	if err != nil {
		t.Fatal(err)
	}
	if most := mostTrialsAtOnce(recs); most > 3 {
		t.Fatalf("%d undo trials overlapped (assigned to last-known-good, from the nodes' records); maxInTrial is 3", most)
	}
	for _, i := range took {
		if at := promotedAt[i]; at.After(halted.LastTransitionTime.Time) {
			t.Fatalf("node %s promoted v2 at %s, after the halt at %s", e.nodes[i].Name, at, halted.LastTransitionTime)
		}
	}
	// The nodes that never took v2 kept v1 as it was: no trial.
	for i := range e.nodes {
		if _, ok := promotedAt[i]; ok {
			continue
		}
		if r := e.records(i); r.GetLastKnownGood().GetSource().GetResourceVersion() != v1.ResourceVersion {
			t.Fatalf("node %s, which never took v2, has last-known-good %v; want v1 untouched", e.nodes[i].Name, r.GetLastKnownGood().GetSource())
		}
	}
	e.waitNodeConfigCondition(e.label, "Progressing", metav1.ConditionFalse, v1alpha1.ReasonHaltedVersionUndone, 30*time.Second)
	e.waitHistory("revision 2 halted", func(h pluginHistory) bool {
		return len(h.Revisions) == 2 && h.Revisions[1].Outcome == v1alpha1.OutcomeHalted
	})
}
