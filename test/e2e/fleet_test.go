package e2e

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/test/framework/proc"
)

// Fleet pacing: with maxInTrial 2, ten nodes take the new config two at a
// time. Checked against the nodes' durable records: each node's trial runs
// from its assigned record's write to its last-known-good's, and at no
// moment do more than two trials overlap.
func TestFleetMaxInTrialNeverExceeded(t *testing.T) {
	e := newEnv(t, 10)
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(1), "rollout": map[string]any{"maxInTrial": int64(2)}})
	var recs []*nodeconfigv1.Records
	err := proc.WaitFor(90*time.Second, func() (bool, error) {
		recs = recs[:0]
		done := 0
		for i := range e.nodes {
			r := e.records(i)
			recs = append(recs, r)
			if r.GetLastKnownGood().GetSource().GetResourceVersion() == cm.ResourceVersion {
				done++
			}
		}
		return done == len(e.nodes), fmt.Errorf("%d of %d promoted", done, len(e.nodes))
	})
	if err != nil {
		t.Fatal(err)
	}
	type trial struct{ from, to time.Time }
	var trials []trial
	for _, r := range recs {
		trials = append(trials, trial{r.GetAssigned().GetWrittenAt().AsTime(), r.GetLastKnownGood().GetWrittenAt().AsTime()})
	}
	most := 0
	for _, at := range trials {
		on := 0
		for _, tr := range trials {
			if !at.from.Before(tr.from) && at.from.Before(tr.to) {
				on++
			}
		}
		most = max(most, on)
	}
	if most > 2 {
		t.Fatalf("%d trials overlapped (assigned to last-known-good, from the nodes' records), maxInTrial is 2: %v", most, trials)
	}
	t.Logf("at most %d trials at once, from the nodes' records", most)
	e.waitNodeConfigCondition(e.label, "Ready", metav1.ConditionTrue, "AllNodesActive", 20*time.Second)
}

// maxFailures 1: the first rollback halts the rollout of that version,
// reported as Degraded/RolloutHalted; the other nodes are not touched.
func TestFleetMaxFailuresHaltsAfterFirstRollback(t *testing.T) {
	e := newEnv(t, 4)
	e.configMap("cfg", map[string]string{"config.yaml": badYAML})
	e.use(e.label, "cfg", map[string]any{"rollout": map[string]any{"maxInTrial": int64(1), "maxFailures": int64(1)}})
	e.waitNodeConfigCondition(e.label, "Degraded", metav1.ConditionTrue, "RolloutHalted", 30*time.Second)
	// The NodeConfig's status can say halted before the reconciler has
	// synced the nodes that were waiting for a place: they learn it on
	// their next sync.
	for _, n := range e.nodes {
		if err := proc.WaitFor(30*time.Second, func() (bool, error) {
			st := e.nodeState(n.Name).GetState()
			return st == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ROLLED_BACK || st == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_HALTED,
				fmt.Errorf("node %s in state %v, want rolled back or halted", n.Name, st)
		}); err != nil {
			t.Fatal(err)
		}
	}
	rolledBack := 0
	for i := range e.nodes {
		if e.records(i).GetAssigned() != nil {
			rolledBack++
		}
	}
	if rolledBack != 1 {
		t.Fatalf("%d nodes were assigned the bad config; maxFailures 1 should stop after the first", rolledBack)
	}
	// A fixed ConfigMap is a new version: the rollout resumes.
	fixed := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	for _, n := range e.nodes {
		e.waitNode(n.Name, 60*time.Second, "fixed version active", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
			return rv(st.Active) == fixed.ResourceVersion
		})
	}
}

func (e *env) waitNodeConfigCondition(name, typ string, status metav1.ConditionStatus, reason string, timeout time.Duration) {
	e.t.Helper()
	e.waitNodeConfig(name, timeout, typ+"="+string(status)+"/"+reason, func(nc *v1alpha1.NodeConfig) bool {
		c := meta.FindStatusCondition(nc.Status.Conditions, typ)
		return c != nil && c.Status == status && c.Reason == reason
	})
}
