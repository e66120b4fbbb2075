package e2e

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/test/framework/proc"
)

// HA: the leader is killed mid-soak; the standby takes over through the
// Lease and promotes at the soak's durable end, exactly once.
func TestLeaderFailoverMidSoakPromotesOnTime(t *testing.T) {
	e := newEnv(t, 1, "--node-events=all")
	n := e.nodes[0]
	leader := e.reconciler
	standby := e.startReconciler("r1", "--node-events=all")
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(8)})
	e.waitNode(n.Name, 20*time.Second, "soaking", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.Active) == cm.ResourceVersion && reasonIs(c, "Soaking")
	})
	recs := e.records(0)
	soakEnd := recs.GetAssigned().GetWrittenAt().AsTime().Add(8 * time.Second)
	leader.Kill()
	e.reconciler = standby
	err := proc.WaitFor(30*time.Second, func() (bool, error) {
		return e.records(0).GetLastKnownGood() != nil, nil
	})
	if err != nil {
		t.Fatalf("standby did not promote: %v", err)
	}
	lkg := e.records(0).GetLastKnownGood()
	if lkg.GetWrittenAt().AsTime().Before(soakEnd) {
		t.Fatalf("promoted at %v, before the soak ended at %v", lkg.GetWrittenAt().AsTime(), soakEnd)
	}
	e.waitState(n.Name, 10*time.Second, nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ACTIVE)
	// Events are recorded in the background: wait for the first, then
	// count them.
	e.waitEvent("Node", n.Name, "ConfigPromoted", 10*time.Second)
	promotions := 0
	for _, ev := range e.events(t, "Node", n.Name, "ConfigPromoted") {
		promotions += int(max(ev.Count, 1))
	}
	if promotions != 1 {
		t.Fatalf("%d ConfigPromoted events, want exactly 1", promotions)
	}
}
