package integration

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"nodeconfig.io/test/proc"
)

// 'make run' headlessly: the local run reaches "ready", every command it
// prints works as printed, the bad config it suggests rolls nodes back, and
// Ctrl-C stops everything it started.
func TestMakeRunCommandsWorkAsPrinted(t *testing.T) {
	root, err := proc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	binDir, err := proc.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	state, err := os.MkdirTemp("", "nc-run-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(state) })
	localrun := filepath.Join(state, "localrun")
	if out, err := exec.Command("go", "build", "-o", localrun, "nodeconfig.io/test/cmd/localrun").CombinedOutput(); err != nil {
		t.Fatalf("build localrun: %v\n%s", err, out)
	}
	cmd := exec.Command(localrun, "--nodes", "2", "--state", state, "--bin", binDir, "--soak-seconds", "5")
	cmd.Dir = root
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(state, "localrun.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("localrun output:\n%s", b)
		}
	})

	var commands []string
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(io.TeeReader(stdout, logf))
		for sc.Scan() {
			line := sc.Text()
			if c, ok := strings.CutPrefix(line, "  $ "); ok {
				commands = append(commands, c)
			}
			if line == "ready" {
				close(ready)
			}
		}
		exited <- cmd.Wait()
	}()
	select {
	case <-ready:
	case err := <-exited:
		t.Fatalf("localrun exited before ready: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("localrun not ready within 2 minutes")
	}
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
			if !strings.Contains(out, "NodeConfigReady") || !strings.Contains(out, "nodeconfig.io/config-status") {
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

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("localrun exit after Ctrl-C: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("localrun did not stop within 60s of Ctrl-C")
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
