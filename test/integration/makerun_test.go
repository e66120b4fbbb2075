package integration

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

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
