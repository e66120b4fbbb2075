package e2e

import (
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/test/framework/audit"
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

// A standby mints every node's agent token while the leader leads, so a
// new leader's first pass finds them ready: the API server's audit log
// shows a second TokenRequest for each node's audience before the kill,
// and none from the kill until the new leader has every node active on a
// change, which it reaches only with tokens the agents accept.
func TestNewLeaderFindsEveryAgentTokenMintedWhileStandingBy(t *testing.T) {
	e := newSecureNodes(t, 2)
	args := e.reconcilerArgs(reconcilerSA)
	leader := e.startReconciler("r0", args...)
	v1 := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(1)})
	e.waitAllPromoted(v1.ResourceVersion)
	standby := e.startReconciler("r1", args...)
	auditLog := filepath.Join(e.c.Dir, "audit.log")
	var minted map[string]int
	if err := proc.WaitFor(30*time.Second, func() (bool, error) {
		trs, err := audit.TokenRequests(auditLog)
		if err != nil {
			return false, err
		}
		minted = map[string]int{}
		for _, tr := range trs {
			for _, a := range tr.Audiences {
				minted[a]++
			}
		}
		for _, n := range e.nodes {
			if minted[audienceOf(n.Name)] < 2 {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the standby never minted each node's token (TokenRequests by audience: %v): %v", minted, err)
	}
	leader.Kill()
	killed := time.Now()
	e.reconciler = standby
	v2 := e.configMap("cfg", map[string]string{"config.yaml": "maxPods: 112\n"})
	for _, n := range e.nodes {
		e.waitNode(n.Name, 60*time.Second, "v2 active under the new leader", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
			return rv(st.Active) == v2.ResourceVersion
		})
	}
	trs, err := audit.TokenRequests(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	ours := map[string]bool{}
	for _, n := range e.nodes {
		ours[audienceOf(n.Name)] = true
	}
	for _, tr := range trs {
		for _, a := range tr.Audiences {
			if ours[a] && !tr.At.Before(killed) {
				t.Errorf("TokenRequest at %v for %s, after the leader was killed at %v: the new leader minted on its first pass", tr.At, a, killed)
			}
		}
	}
}
