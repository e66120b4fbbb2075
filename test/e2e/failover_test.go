package e2e

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/test/framework/grpcspy"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/framework/sim"
)

// HA: the leader is killed mid-soak; the standby takes over through the
// Lease and promotes at the soak's durable end, exactly once: the node's
// agent, which both replicas reach through a spy, is asked to promote
// once, not before the soak's end, and before a soak begun again at the
// standby's first call would end.
func TestLeaderFailoverMidSoakPromotesOnTime(t *testing.T) {
	e := newNodes(t, 1, func(int) sim.NodeOptions { return sim.NodeOptions{} })
	n := e.nodes[0]
	spy := grpcspy.Start(t, "unix://"+n.Socket)
	through := []string{"--node-events=all", "--agent-address", n.Name + "=" + spy.Target}
	leader := e.startReconciler("r0", through...)
	standby := e.startReconciler("r1", through...)
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(8)})
	e.waitNode(n.Name, 20*time.Second, "soaking", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.Active) == cm.ResourceVersion && reasonIs(c, "Soaking")
	})
	soakEnd := records.SoakEnd(e.records(0))
	leader.Kill()
	killed := time.Now()
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
	e.waitEvent("Node", n.Name, "ConfigPromoted", 10*time.Second)
	// Every sync of the standby since saw last-known-good in place: one
	// that began after this one has completed.
	e.resync(n.Name, 20*time.Second)
	promotions := spy.Calls(nodeconfigv1.CheckpointService_PromoteLastKnownGood_FullMethodName)
	if len(promotions) != 1 {
		t.Fatalf("the node's agent received %d promotions (%v), want exactly 1", len(promotions), promotions)
	}
	if promotions[0].At.Before(soakEnd) {
		t.Fatalf("the node's agent was asked to promote at %v, before the soak ended at %v", promotions[0].At, soakEnd)
	}
	// The standby's first call reaches the agent once it leads.
	var took time.Time
	for _, c := range spy.Calls("") {
		if c.At.After(killed) {
			took = c.At
			break
		}
	}
	if restarted := took.Add(8 * time.Second); !promotions[0].At.Before(restarted) {
		t.Fatalf("the node's agent was asked to promote at %v, not before a soak begun again at the standby's first call (%v) would end at %v", promotions[0].At, took, restarted)
	}
	if got := e.records(0).GetLastKnownGood(); !proto.Equal(got, lkg) {
		t.Fatalf("last-known-good was written again: %v, first %v", got, lkg)
	}
}
