package realnode_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"nodeconfig.io/test/framework/nodeview"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/realnode"
)

// noConfigDirLine is what the agent tells a kubelet without --config-dir
// to add: the overlay's --suggested-config-dir, the one it mounts
// read-write here.
var noConfigDirLine = "add --config-dir=" + realnode.ConfigDir + " to the kubelet's flags (KUBELET_EXTRA_ARGS)"

// restartKubeletWithoutConfigDir restarts the kubelet without --config-dir,
// as many installs run it, and returns the arguments it had.
func restartKubeletWithoutConfigDir(ctx context.Context, t *testing.T) []string {
	t.Helper()
	with := node.KubeletArgs()
	i := slices.Index(with, "--config-dir")
	if i < 0 {
		t.Fatalf("the kubelet runs without --config-dir already: %q", with)
	}
	without := slices.Delete(slices.Clone(with), i, i+2)
	if err := node.RestartKubeletWith(without); err != nil {
		t.Fatal(err)
	}
	if err := node.WaitNodeReady(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	return with
}

// refusedWithoutConfigDir: the agent installed on a kubelet without
// --config-dir finds it so on the kubelet's command line and refuses the
// assigned version rv: the Node's condition says the one flag to add, the
// kubelet is not restarted (starts counts its starts before the install),
// and no drop-in is written (the drop-in directory, the one the agent may
// write, stays empty on disk). Once the
// kubelet runs with it again (a person adds the flag and restarts it), the
// agent follows it by itself, without a restart of its own, and writes
// the drop-in there. It returns the kubelet's starts once it runs with it.
func refusedWithoutConfigDir(ctx context.Context, t *testing.T, rv string, withConfigDir []string, starts int) int {
	t.Helper()
	agent := checkpointdPid(t)
	waitStatus(ctx, t, "refused, the kubelet having no --config-dir", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return c.Status == corev1.ConditionFalse && c.Reason == "KubeletNoConfigDir" && strings.Contains(c.Message, noConfigDirLine) &&
			nodeview.ResourceVersion(st.Assigned) == rv && st.Active == nil
	})
	for _, dir := range []string{realnode.ConfigDir, realnode.EtcKubernetes} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				err = fmt.Errorf("%s written", path)
			}
			return err
		})
		if err != nil {
			t.Fatalf("after the refusal: %v; want no file under %s: no drop-in written", err, dir)
		}
	}
	if got := node.Kubelet.Starts(); got != starts {
		t.Fatalf("the kubelet was started %d times since the agent was installed on it; want none", got-starts)
	}

	if err := node.RestartKubeletWith(withConfigDir); err != nil {
		t.Fatal(err)
	}
	// The agent restarts the kubelet onto the drop-in no sooner than
	// RestartDelay after it writes it: this start is the person's.
	starts = node.Kubelet.Starts()
	// The reconciler retries the refused activation with backoff (up to
	// 2 minutes between tries).
	var last string
	if err := proc.WaitFor(4*time.Minute, func() (bool, error) {
		b, err := os.ReadFile(filepath.Join(realnode.ConfigDir, dropIn))
		last = fmt.Sprintf("%q %v", b, err)
		return err == nil, nil
	}); err != nil {
		t.Fatalf("no drop-in once the kubelet has --config-dir: %v (last %s)\n%s", err, last, diagnose(ctx))
	}
	if pid := checkpointdPid(t); pid != agent {
		t.Fatalf("checkpointd runs as pid %d, not %d: it restarted to follow the kubelet", pid, agent)
	}
	return starts
}
