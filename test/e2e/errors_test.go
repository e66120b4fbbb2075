package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/test/framework/grpcspy"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/framework/sim"
)

const badYAML = "maxPods: [110\n"

// "Active will represent either the current version of the Assigned config,
// or the current LastKnownGood config, depending on whether attempting to
// use the Assigned config results in an error." / "Later errors (e.g.
// loading or validating a checkpointed config) will result in a rollback to
// LastKnownGood."
func TestLateErrorRollsBackToLastKnownGood(t *testing.T) {
	e := newEnv(t, 1)
	node := e.nodes[0].Name
	good := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", nil)
	e.waitNode(node, 20*time.Second, "good config promoted", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.LastKnownGood) == good.ResourceVersion && reasonIs(c, "Active")
	})
	bad := e.configMap("cfg", map[string]string{"config.yaml": badYAML})
	e.waitNode(node, 20*time.Second, "rolled back", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.Assigned) == bad.ResourceVersion && rv(st.Active) == good.ResourceVersion &&
			rv(st.LastKnownGood) == good.ResourceVersion && st.Error != "" &&
			reasonIs(c, "RolledBack") && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, st.Error)
	})
	if got, _ := e.nodes[0].Target(); got != goodYAML {
		t.Fatalf("target = %q, want the last-known-good payload", got)
	}
	e.waitEvent("Node", node, "ConfigRolledBack", 10*time.Second)
}

// "Later errors ... it is usually possible to resolve the error by fixing
// the config assigned in Spec.ConfigSource." — and not by retrying.
func TestLateErrorIsFixedByNewConfigNotByRetry(t *testing.T) {
	e := newEnv(t, 1)
	node := e.nodes[0].Name
	bad := e.configMap("cfg", map[string]string{"config.yaml": badYAML})
	e.use(e.label, "cfg", nil)
	e.waitNode(node, 20*time.Second, "rolled back to the local default", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.Assigned) == bad.ResourceVersion && st.Active == nil && reasonIs(c, "RolledBack")
	})
	before := e.records(0).GetRevision()
	// Three syncs that have run (not only been asked for): the records
	// must not have moved.
	for range 3 {
		if st := e.resync(node, 10*time.Second); st.GetState() != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ROLLED_BACK {
			t.Fatalf("state after a resync: %v, want ROLLED_BACK", st.GetState())
		}
	}
	if after := e.records(0).GetRevision(); after != before {
		t.Fatalf("records changed from revision %d to %d: a rolled-back config was retried", before, after)
	}
	fixed := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.waitNode(node, 20*time.Second, "fixed config active", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.Active) == fixed.ResourceVersion && st.Error == ""
	})
}

// "Earlier errors (e.g. download or checkpointing errors) will not result
// in a rollback to LastKnownGood, and may resolve across Kubelet retries."
func TestEarlyErrorMissingConfigMapRetriesWithBackoffAndHeals(t *testing.T) {
	e := newNodes(t, 1, func(int) sim.NodeOptions { return sim.NodeOptions{} })
	node := e.nodes[0].Name
	// The retries as the node's agent receives them: each sync begins with
	// a GetRecords, and only the reconciler calls through the spy.
	spy := grpcspy.Start(t, "unix://"+e.nodes[0].Socket)
	// A cap far enough away that the growth is seen even on a slow machine.
	e.startReconciler("r0", "--retry-max-delay", "10s", "--agent-address", node+"="+spy.Target)
	// Not there yet, even where an earlier run of this test (-count) made it.
	if err := e.c.Client.CoreV1().ConfigMaps(e.ns).Delete(e.ctx, "not-yet", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	used := time.Now()
	e.use(e.label, "not-yet", nil)
	e.waitNode(node, 20*time.Second, "download failure reported", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return reasonIs(c, "DownloadFailed") && c.Status == corev1.ConditionFalse && st.Active == nil && st.Assigned == nil
	})
	syncs := func() []time.Time {
		var at []time.Time
		for _, c := range spy.Calls(nodeconfigv1.CheckpointService_GetRecords_FullMethodName) {
			if c.At.After(used) {
				at = append(at, c.At)
			}
		}
		return at
	}
	if len(syncs()) == 0 {
		t.Fatal("the node reports the failure, but its agent saw no sync through the spy")
	}
	// The retries thin out: at a fixed delay (the base, 200 ms) two windows
	// of 10 s from the first failure would each see 50 of them; doubling,
	// the second sees a handful at most, and still at least one.
	const window = 10 * time.Second
	first := syncs()[0]
	time.Sleep(time.Until(first.Add(2 * window))) // the windows observed
	var inFirst, inSecond int
	for _, at := range syncs() {
		switch since := at.Sub(first); {
		case since < window:
			inFirst++
		case since < 2*window:
			inSecond++
		}
	}
	t.Logf("the agent saw %d syncs in the first %v after the first failure, %d in the next", inFirst, window, inSecond)
	if inSecond < 1 || 2*inSecond > inFirst {
		t.Fatalf("the agent saw %d syncs in the first %v after the first failure and %d in the next: want retries that thin out (under half) but go on", inFirst, window, inSecond)
	}
	if got := e.nodeState(node).GetBackoff().AsDuration(); got > 10*time.Second {
		t.Fatalf("backoff %v over the configured cap of 10s", got)
	}
	cm := e.configMap("not-yet", map[string]string{"config.yaml": goodYAML})
	e.waitNode(node, 20*time.Second, "healed", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.Active) == cm.ResourceVersion && st.Error == "" && c.Status == corev1.ConditionTrue
	})
}

// A key the source names but the ConfigMap lacks is an early error too.
func TestEarlyErrorMissingKeyHealsWhenKeyAppears(t *testing.T) {
	e := newEnv(t, 1)
	node := e.nodes[0].Name
	e.configMap("cfg", map[string]string{"other": "x"})
	e.use(e.label, "cfg", nil)
	e.waitNode(node, 20*time.Second, "download failure", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return reasonIs(c, "DownloadFailed") && strings.Contains(st.Error, "config.yaml")
	})
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.waitNode(node, 20*time.Second, "healed", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.Active) == cm.ResourceVersion && st.Error == ""
	})
}

// An unreachable checkpointd is an early error for that node only: the
// condition turns Unknown, nothing rolls back, and it heals on restart.
func TestEarlyErrorCheckpointdUnreachableHeals(t *testing.T) {
	e := newEnv(t, 2)
	down, up := e.nodes[0], e.nodes[1]
	down.Checkpointd.Kill()
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", nil)
	e.waitNode(up.Name, 20*time.Second, "other node proceeds", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
		return rv(st.Active) == cm.ResourceVersion
	})
	err := proc.WaitFor(20*time.Second, func() (bool, error) {
		n, err := e.c.Client.CoreV1().Nodes().Get(e.ctx, down.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == v1alpha1.NodeConditionConfigReady {
				return c.Status == corev1.ConditionUnknown && c.Reason == "CheckpointdUnavailable", nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("condition not Unknown/CheckpointdUnavailable: %v", err)
	}
	e.waitState(down.Name, 10*time.Second, nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING)
	if err := down.Checkpointd.Restart(); err != nil {
		t.Fatal(err)
	}
	e.waitNode(down.Name, 30*time.Second, "healed", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
		return rv(st.Active) == cm.ResourceVersion
	})
	_ = context.Background
}

// An early error is a Warning the user finds with kubectl get events: one
// UpdateFailed on the Node per distinct error, not one per retry.
func TestEarlyErrorIsOneWarningEventNotOnePerRetry(t *testing.T) {
	e := newEnv(t, 1)
	node := e.nodes[0].Name
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(1)})
	e.waitNode(node, 20*time.Second, "promoted", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
		return rv(st.LastKnownGood) == cm.ResourceVersion
	})
	if err := e.c.Client.CoreV1().ConfigMaps(e.ns).Delete(e.ctx, "cfg", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := proc.WaitFor(30*time.Second, func() (bool, error) {
		return e.nodeState(node).GetFailures() >= 4, nil
	}); err != nil {
		t.Fatalf("no repeated early errors: %v (state %v)", err, e.nodeState(node))
	}
	e.waitEvent("Node", node, "UpdateFailed", 10*time.Second)
	got := e.events(t, "Node", node, "UpdateFailed")
	if len(got) != 1 || got[0].Count != 1 || got[0].Type != corev1.EventTypeWarning || !strings.Contains(got[0].Message, "cfg") {
		t.Fatalf("UpdateFailed events %+v after %d retries, want one Warning naming the ConfigMap", got, e.nodeState(node).GetFailures())
	}
}
