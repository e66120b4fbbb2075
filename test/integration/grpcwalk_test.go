package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/framework/sim"
)

// The grpcurl walk-through of docs/grpc.md, run as written: each command's output
// holds every line the page shows under it (no lines shown: no output).
func TestGrpcurlWalkthroughOfTheDocs(t *testing.T) {
	root, err := proc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "docs", "grpc.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "<!-- walkthrough:begin -->")
	block, _, ok2 := strings.Cut(block, "<!-- walkthrough:end -->")
	if !ok || !ok2 {
		t.Fatal("docs/grpc.md has no walkthrough markers")
	}
	type step struct {
		command string
		want    []string
	}
	var steps []step
	for _, line := range strings.Split(block, "\n") {
		switch {
		case strings.HasPrefix(line, "```"):
		case strings.HasPrefix(line, "$ "):
			steps = append(steps, step{command: strings.TrimPrefix(line, "$ ")})
		case strings.TrimSpace(line) != "" && len(steps) > 0:
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, strings.TrimSpace(line))
		}
	}
	if len(steps) < 8 {
		t.Fatalf("walkthrough has %d commands", len(steps))
	}

	// Start checkpointd the way the README does.
	const demo = "/tmp/nc-demo"
	_ = os.RemoveAll(demo)
	t.Cleanup(func() { _ = os.RemoveAll(demo) })
	bin, err := proc.Binary("checkpointd")
	if err != nil {
		t.Fatal(err)
	}
	p, err := proc.Start("checkpointd", bin, []string{"--state-dir", demo + "/state", "--target-dir", demo + "/target", "--socket", demo + "/checkpointd.sock"}, filepath.Join(t.TempDir(), "checkpointd.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	if err := sim.WaitServing("127.0.0.1:7601", 20*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, p.Tail(2000))
	}
	for _, s := range steps {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, "bash", "-c", s.command)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		cancel()
		showsError := false
		for _, w := range s.want {
			showsError = showsError || strings.HasPrefix(w, "Code:")
			if !strings.Contains(string(out), w) {
				t.Fatalf("$ %s\nwant a line %q in:\n%s", s.command, w, out)
			}
		}
		if err != nil && !showsError {
			t.Fatalf("$ %s: %v\n%s", s.command, err, out)
		}
		if len(s.want) == 0 && strings.TrimSpace(string(out)) != "" {
			t.Fatalf("$ %s: want no output, got:\n%s", s.command, out)
		}
	}
}
