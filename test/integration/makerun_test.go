package integration

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/test/framework/proc"
)

// 'make run' headlessly: the local run reaches "ready", every command it
// prints works as printed, the bad config it suggests rolls nodes back, and
// Ctrl-C stops everything it started.
func TestMakeRunCommandsWorkAsPrinted(t *testing.T) {
	state, err := os.MkdirTemp("", "nc-run-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(state) })
	run := startLocalRun(t, state)
	root, commands := run.root, run.printed()
	if len(commands) < 8 {
		t.Fatalf("only %d commands printed", len(commands))
	}
	kubectl := ""
	for _, c := range commands {
		out := shell(t, root, c)
		if strings.HasPrefix(c, "kubectl") && kubectl == "" {
			kubectl = strings.Join(strings.Fields(c)[:3], " ")
		}
		switch {
		case strings.Contains(c, "get nodeconfigs"):
			if !strings.Contains(out, "demo") || !strings.Contains(out, "SOURCE") {
				t.Fatalf("%s:\n%s", c, out)
			}
		case strings.Contains(c, "ListNodes"):
			if !strings.Contains(out, "node-0") || !strings.Contains(out, "LIFECYCLE_STATE_") {
				t.Fatalf("%s:\n%s", c, out)
			}
		case strings.Contains(c, "GetRecords"):
			if !strings.Contains(out, "records") {
				t.Fatalf("%s:\n%s", c, out)
			}
		case strings.Contains(c, "describe node"):
			if !strings.Contains(out, "NodeConfigReady") || !strings.Contains(out, v1alpha1.NodeAnnotationConfigStatus) {
				t.Fatalf("%s:\n%s", c, out)
			}
		}
	}
	// The suggested bad config (the last command) is refused before any
	// node gets it, and no node rolls back.
	var out string
	err = proc.WaitFor(60*time.Second, func() (bool, error) {
		out = shell(t, root, kubectl+" get nodeconfig demo -o jsonpath='{.status.conditions[?(@.type==\"Degraded\")].reason}'")
		return strings.Contains(out, "ConfigRefused"), nil
	})
	if err != nil {
		t.Fatalf("demo NodeConfig Degraded reason = %q after the printed bad config, want ConfigRefused: %v", out, err)
	}
	if out := shell(t, root, kubectl+` get nodes -o jsonpath='{.items[*].status.conditions[?(@.type=="NodeConfigReady")].reason}'`); strings.Contains(out, "RolledBack") {
		t.Fatalf("a node rolled back from a config the reconciler refused: %s", out)
	}
	// The condition is the reconciler's decision, not what the nodes hold:
	// once a sync of each node that began after it has run, each node's
	// own store, asked through its checkpointd, holds no checkpoint of the
	// refused version.
	refused := strings.Fields(shell(t, root, kubectl+" -n nodeconfig-demo get configmap kubelet-config -o jsonpath='{.metadata.uid} {.metadata.resourceVersion}'"))
	if len(refused) != 2 {
		t.Fatalf("the refused ConfigMap's uid and resourceVersion: %q", refused)
	}
	for node, agent := range map[string]string{"node-0": "127.0.0.1:7601", "node-1": "127.0.0.1:7611"} {
		resyncAt(t, makeRunReconciler, node)
		if stored := checkpointsOf(t, agent, refused[0], refused[1]); len(stored) > 0 {
			t.Fatalf("%s's store holds a checkpoint of the refused version (resourceVersion %s), stored at %v", node, refused[1], stored)
		}
	}

	if err := run.ctrlC(); err != nil {
		t.Fatalf("localrun after Ctrl-C: %v", err)
	}
	for _, addr := range []string{"127.0.0.1:7601", "127.0.0.1:7602", "127.0.0.1:7603", "127.0.0.1:7611"} {
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			t.Fatalf("%s still listening after Ctrl-C", addr)
		}
	}
}

func shell(t *testing.T, dir, command string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", command)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", command, err, out)
	}
	return string(out)
}

// resyncAt asks the reconciler at addr to sync node and waits until a sync
// that began after the ask has run (its count of begun syncs, at the ask,
// is passed by its completed ones).
func resyncAt(t *testing.T, addr, node string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := nodeconfigv1.NewReconcilerServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := client.Resync(ctx, &nodeconfigv1.ResyncRequest{NodeName: node})
	if err != nil {
		t.Fatalf("resync %s: %v", node, err)
	}
	var syncs uint64
	if err := proc.WaitFor(30*time.Second, func() (bool, error) {
		st, err := client.GetNode(ctx, &nodeconfigv1.GetNodeRequest{NodeName: node})
		syncs = st.GetNode().GetSyncs()
		return syncs > resp.GetSyncsStarted(), err
	}); err != nil {
		t.Fatalf("node %s: no sync began after the resync and ran (%d begun at it, last completed %d): %v", node, resp.GetSyncsStarted(), syncs, err)
	}
}

// checkpointsOf lists the checkpoints of uid at resourceVersion that the
// checkpointd at addr holds, by when each was stored.
func checkpointsOf(t *testing.T, addr, uid, resourceVersion string) []time.Time {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := nodeconfigv1.NewCheckpointServiceClient(conn).ListCheckpoints(ctx, &nodeconfigv1.ListCheckpointsRequest{})
	if err != nil {
		t.Fatalf("list the checkpoints of %s: %v", addr, err)
	}
	var stored []time.Time
	for _, c := range resp.GetCheckpoints() {
		if s := c.GetSource(); s.GetUid() == uid && s.GetResourceVersion() == resourceVersion {
			stored = append(stored, c.GetStoredAt().AsTime())
		}
	}
	return stored
}
