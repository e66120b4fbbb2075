package rules

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// promtoolRun runs promtool in dir; a non-zero exit fails the test with
// its output. promtool is taken from PATH, or where make promtool puts it.
func promtoolRun(t *testing.T, root, dir string, args ...string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if promtool, err = exec.LookPath(filepath.Join(root, "bin", "promtool")); err != nil {
			t.Fatalf("promtool is needed to test the alert rules and the dashboard: make promtool puts it in ./bin (from Debian's prometheus package): %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, promtool, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("promtool %v: %v", args, err)
	}
	if err != nil {
		t.Errorf("promtool %v: %v\n%s", args, err, out)
	}
}
