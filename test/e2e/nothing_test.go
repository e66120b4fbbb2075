package e2e

import (
	"context"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// nothingReached checks that a version the rollout must not act on (one it
// refused, one it holds back) reached no node. Conditions and events say
// what the reconciler decided, not that every node's sync after the change
// has run: so it first waits, for every node, until a sync that began
// after the call has completed (resync), then asks each node's own store,
// through its checkpointd and not the reconciler's view, for the version.
// The node's records must be before's (their String, by node index) and
// its file unchanged.
func (e *env) nothingReached(cm *corev1.ConfigMap, before []string, file string) {
	e.t.Helper()
	all := make([]int, len(e.nodes))
	for i := range all {
		all[i] = i
	}
	e.nothingReachedOn(all, cm, before, file)
}

// nothingReachedOn is nothingReached for the nodes of the given indexes
// (before is still by node index).
func (e *env) nothingReachedOn(nodes []int, cm *corev1.ConfigMap, before []string, file string) {
	e.t.Helper()
	for _, i := range nodes {
		e.resync(e.nodes[i].Name, 30*time.Second)
	}
	for _, i := range nodes {
		n := e.nodes[i]
		ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
		resp, err := n.Checkpoint().ListCheckpoints(ctx, &nodeconfigv1.ListCheckpointsRequest{}, grpc.WaitForReady(true))
		cancel()
		if err != nil {
			e.t.Fatalf("node %s: list its checkpoints: %v", n.Name, err)
		}
		for _, c := range resp.GetCheckpoints() {
			if s := c.GetSource(); s.GetUid() == string(cm.UID) && s.GetResourceVersion() == cm.ResourceVersion {
				e.t.Fatalf("node %s's store holds a checkpoint of %s/%s at resourceVersion %s (stored %v), a version that must reach no node",
					n.Name, cm.Namespace, cm.Name, cm.ResourceVersion, c.GetStoredAt().AsTime())
			}
		}
		if after := e.records(i).String(); after != before[i] {
			e.t.Fatalf("node %s's records changed for a version that must reach no node:\nbefore %s\nafter  %s", n.Name, before[i], after)
		}
		if got, _ := n.Target(); got != file {
			e.t.Fatalf("node %s's file is %q, want %q unchanged", n.Name, got, file)
		}
	}
}
