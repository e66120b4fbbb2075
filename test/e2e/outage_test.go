package e2e

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// The API server goes away for a minute mid-rollout. The nodes keep their
// config; the leader loses its Lease, so nobody promotes while no leader can
// be sure it is the only one. When the API server is back a leader is elected
// again, promotes the nodes whose soak ended (from their durable records),
// every Node shows the truth within one capped backoff, and nothing was
// promoted twice.
func TestAPIServerOutageMidRolloutLosesNothing(t *testing.T) {
	outage := 60 * time.Second
	if v, err := strconv.Atoi(os.Getenv("OUTAGE_SECONDS")); err == nil {
		outage = time.Duration(v) * time.Second
	}
	e := newEnv(t, 3, "--node-events=all")
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	// All three on trial together (the default is 10 %: one at a time).
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(10), "rollout": map[string]any{"maxInTrial": "100%"}})
	for _, n := range e.nodes {
		e.waitNode(n.Name, 30*time.Second, "soaking", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
			return rv(st.Active) == cm.ResourceVersion && reasonIs(c, "Soaking")
		})
	}
	e.c.APIServer.Kill()
	outageStart := time.Now()
	// The fault lasts a fixed time; what the test waits on afterwards are conditions.
	deadline := time.After(outage)
	promotedDuring := map[int]*nodeconfigv1.SourceRecord{}
	tick := time.NewTicker(500 * time.Millisecond)
	for waiting := true; waiting; {
		select {
		case <-deadline:
			waiting = false
		case <-tick.C:
			for i := range e.nodes {
				if lkg := e.records(i).GetLastKnownGood(); lkg != nil && promotedDuring[i] == nil {
					promotedDuring[i] = proto.Clone(lkg).(*nodeconfigv1.SourceRecord)
				}
			}
		}
	}
	tick.Stop()
	if len(promotedDuring) > 0 {
		t.Fatalf("%d node(s) promoted while the API server was down (their own records: %v): no leader could be sure it was the only one", len(promotedDuring), promotedDuring)
	}
	restarted := time.Now()
	if err := e.c.APIServer.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := e.c.WaitReady(context.Background(), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	t.Logf("API server down for %s; %d of %d nodes promoted during the outage", back.Sub(outageStart).Round(time.Second), len(promotedDuring), len(e.nodes))
	// Caught up within one capped backoff (statusd 7 s, reconciler 2 s here)
	// plus the informers' relist; the deadline leaves room for a slow machine.
	for _, n := range e.nodes {
		e.waitNode(n.Name, 60*time.Second, "promoted and reported", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
			return rv(st.LastKnownGood) == cm.ResourceVersion && reasonIs(c, "Active")
		})
	}
	t.Logf("all Nodes show the promotion %s after the API server returned", time.Since(back).Round(100*time.Millisecond))
	for i, n := range e.nodes {
		lkg := e.records(i).GetLastKnownGood()
		if at := lkg.GetWrittenAt().AsTime(); at.Before(restarted) {
			t.Fatalf("node %s's last-known-good was written at %v, before the API server came back at %v", n.Name, at, restarted)
		}
		promotions := 0
		for _, ev := range e.events(t, "Node", n.Name, "ConfigPromoted") {
			promotions += int(max(ev.Count, 1))
		}
		if promotions > 1 {
			t.Fatalf("node %s has %d ConfigPromoted events", n.Name, promotions)
		}
	}
}
