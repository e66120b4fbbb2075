package e2e

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/test/framework/proc"
)

// maxFailures 1 halts a bad version after its first rollback, and the halt
// is a fact about the version, not about the nodes the reconciler can see:
// deleting the node that rolled back, patching soakSeconds, or a reconciler
// fail-over admits no other node to it. A new version resumes the rollout.
func TestRolloutHaltSurvivesNodeDeletionSpecEditAndFailover(t *testing.T) {
	e := newEnv(t, 3)
	e.configMap("cfg", map[string]string{"config.yaml": badYAML})
	rollout := map[string]any{"maxInTrial": int64(1), "maxFailures": int64(1)}
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(2), "rollout": rollout})
	e.waitNodeConfigCondition(e.label, "Degraded", metav1.ConditionTrue, "RolloutHalted", 30*time.Second)

	failed := -1
	for i := range e.nodes {
		if e.records(i).GetAssigned() != nil {
			if failed >= 0 {
				t.Fatalf("nodes %d and %d were both assigned the bad version", failed, i)
			}
			failed = i
		}
	}
	if failed < 0 {
		t.Fatal("the rollout halted but no node has the bad version assigned")
	}
	var rest []int
	for i := range e.nodes {
		if i != failed {
			rest = append(rest, i)
		}
	}
	// stillHalted resyncs the other nodes, waits until the reconciler has
	// looked at each (state HALTED), and checks on each node's own records
	// that nothing was assigned.
	stillHalted := func(step string) {
		t.Helper()
		for _, i := range rest {
			e.resyncAndWait(e.nodes[i].Name, 20*time.Second, nodeconfigv1.LifecycleState_LIFECYCLE_STATE_HALTED)
			if a := e.records(i).GetAssigned(); a != nil {
				t.Fatalf("%s: node %s was admitted to the halted version: assigned %v", step, e.nodes[i].Name, a)
			}
		}
		e.waitNodeConfigCondition(e.label, "Degraded", metav1.ConditionTrue, "RolloutHalted", 20*time.Second)
	}

	// The node that rolled back goes away (autoscaler, replacement).
	gone := e.nodes[failed]
	gone.Stop()
	if err := e.c.Client.CoreV1().Nodes().Delete(e.ctx, gone.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitSelected(e.label, 2, 20*time.Second)
	stillHalted("after the rolled-back node was deleted")

	// A spec edit that does not change the version.
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(3), "rollout": rollout})
	stillHalted("after soakSeconds changed")

	// A new leader knows only what the API and the nodes say.
	e.reconciler.Close()
	e.reconciler = nil
	e.startReconciler("r1")
	stillHalted("after a reconciler fail-over")

	fixed := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	for _, i := range rest {
		e.waitNode(e.nodes[i].Name, 60*time.Second, "fixed version active", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
			return rv(st.Active) == fixed.ResourceVersion
		})
	}
}

// A validator that refuses the payload rolls the node back; switching the
// validator back to the one the node's last-known-good passed is not a new
// trial held by the halt: the node is healed at once and the NodeConfig is
// Ready again.
func TestSwitchingBackToLastKnownGoodHealsAtOnce(t *testing.T) {
	e := newEnv(t, 1)
	n := e.nodes[0]
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(1), "validator": "yaml"})
	e.waitNode(n.Name, 20*time.Second, "promoted under yaml", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.LastKnownGood) == cm.ResourceVersion && reasonIs(c, "Active")
	})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(1), "validator": "json"})
	e.waitNode(n.Name, 20*time.Second, "rolled back under json", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return reasonIs(c, "RolledBack") && st.Error != ""
	})
	e.waitNodeConfigCondition(e.label, "Degraded", metav1.ConditionTrue, "RolloutHalted", 20*time.Second)
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(1), "validator": "yaml"})
	e.waitNode(n.Name, 20*time.Second, "healed under yaml", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return reasonIs(c, "Active") && c.Status == corev1.ConditionTrue && st.Error == "" && rv(st.Active) == cm.ResourceVersion
	})
	if a := e.records(0).GetAssigned(); a.GetValidator() != nodeconfigv1.Validator_VALIDATOR_YAML || a.GetSource().GetResourceVersion() != cm.ResourceVersion {
		t.Fatalf("assigned %v, want the ConfigMap under yaml", a)
	}
	e.waitNodeConfigCondition(e.label, "Ready", metav1.ConditionTrue, "AllNodesActive", 20*time.Second)
	if got, _ := n.Target(); got != goodYAML {
		t.Fatalf("target = %q", got)
	}
}

// waitSelected waits until the NodeConfig's status counts n selected nodes.
func (e *env) waitSelected(name string, n int64, timeout time.Duration) {
	e.t.Helper()
	e.waitNodeConfig(name, timeout, fmt.Sprintf("%d selected nodes", n), func(nc *v1alpha1.NodeConfig) bool {
		return int64(nc.Status.Selected) == n
	})
}

// resyncAndWait asks the reconciler to sync a node and waits until a sync
// that began after the ask has reported the wanted state.
func (e *env) resyncAndWait(name string, timeout time.Duration, want nodeconfigv1.LifecycleState) {
	e.t.Helper()
	got := e.resync(name, timeout)
	if got.GetState() != want {
		e.t.Fatalf("node %s after a resync: state %v, want %v", name, got.GetState(), want)
	}
}

// resync asks the reconciler to sync a node and returns the node's state
// once a sync that began after the ask has run. A Resync only enqueues, and
// a sync under way when it was asked (begun before it) ends after it: so
// the wait is not for the node's last completed sync to move, but for its
// place among the begun syncs to pass the count begun at the ask, which the
// Resync returns (a node's syncs run one at a time).
func (e *env) resync(name string, timeout time.Duration) *nodeconfigv1.NodeState {
	e.t.Helper()
	var ticket uint64
	// A reconciler that just started answers Unavailable until it leads,
	// and NotFound for a node it has not synced yet.
	err := proc.WaitFor(timeout, func() (bool, error) {
		if _, err := e.reconciler.Client().GetNode(e.ctx, &nodeconfigv1.GetNodeRequest{NodeName: name}); err != nil {
			return false, err
		}
		resp, err := e.reconciler.Client().Resync(e.ctx, &nodeconfigv1.ResyncRequest{NodeName: name})
		if err != nil {
			return false, err
		}
		ticket = resp.GetSyncsStarted()
		return true, nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	var got *nodeconfigv1.NodeState
	if err := proc.WaitFor(timeout, func() (bool, error) {
		got = e.nodeState(name)
		return got.GetSyncs() > ticket, nil
	}); err != nil {
		e.t.Fatalf("node %s: no sync began after the resync and ran (syncs begun at the resync %d; now the last completed is sync %d of %d begun): %v",
			name, ticket, got.GetSyncs(), got.GetSyncsStarted(), err)
	}
	return got
}
