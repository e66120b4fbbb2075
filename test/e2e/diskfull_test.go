package e2e

import (
	crand "crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/test/framework/proc"
)

// setFileSizeLimit caps how large a file checkpointd may make (RLIMIT_FSIZE):
// past it every write fails with EFBIG, as on a full disk, without needing
// a small filesystem or privileges. Go ignores SIGXFSZ, so the write
// returns the error instead of killing the process.
func setFileSizeLimit(t *testing.T, pid int, limit uint64) {
	t.Helper()
	if err := unix.Prlimit(pid, unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: limit, Max: unix.RLIM_INFINITY}, nil); err != nil {
		t.Fatalf("prlimit: %v", err)
	}
}

// A full disk under checkpointd is an early error: the new config is not
// checkpointed, the node keeps running its last-known-good (target file
// untouched), the status says why, and the rollout finishes by itself once
// there is space again; the store still opens after a hard kill.
func TestDiskFullIsAnEarlyErrorAndRecovers(t *testing.T) {
	e := newEnv(t, 1)
	n := e.nodes[0]
	good := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(1)})
	e.waitNode(n.Name, 20*time.Second, "first config promoted", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.LastKnownGood) == good.ResourceVersion && reasonIs(c, "Active")
	})

	db := filepath.Join(n.Dir, "state", "checkpoints.db")
	fi, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	setFileSizeLimit(t, n.Checkpointd.Pid(), uint64(fi.Size()))
	// Bigger than anything the store has room for, even compressed (the
	// store compresses payloads, so the padding is random); still a valid
	// config.
	noise := make([]byte, 525<<10)
	if _, err := crand.Read(noise); err != nil {
		t.Fatal(err)
	}
	big := goodYAML + "padding: " + base64.StdEncoding.EncodeToString(noise) + "\n"
	bigCM := e.configMap("cfg", map[string]string{"config.yaml": big})

	var last *nodeconfigv1.NodeState
	if err := proc.WaitFor(20*time.Second, func() (bool, error) {
		last = e.nodeState(n.Name)
		return strings.Contains(last.GetError(), "file too large") && last.GetFailures() >= 2, nil
	}); err != nil {
		t.Fatalf("want repeated early errors naming the cause: %v; last state %v", err, last)
	}
	st, cond, err := e.status(n.Name)
	if err != nil {
		t.Fatal(err)
	}
	if rv(st.Active) != good.ResourceVersion || rv(st.LastKnownGood) != good.ResourceVersion {
		t.Fatalf("while the disk is full: active %v lkg %v, want both still %s", st.Active, st.LastKnownGood, good.ResourceVersion)
	}
	if st.Error == "" || cond == nil || cond.Reason != "CheckpointFailed" || !strings.Contains(cond.Message, "file too large") || !strings.Contains(cond.Message, "still using") {
		t.Fatalf("the status should name the early error and the config still in use; error %q condition %+v", st.Error, cond)
	}
	if got, _ := n.Target(); got != goodYAML {
		t.Fatalf("target file changed while the disk is full: %d bytes", len(got))
	}

	setFileSizeLimit(t, n.Checkpointd.Pid(), unix.RLIM_INFINITY)
	e.waitNode(n.Name, 30*time.Second, "big config promoted after space came back", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.LastKnownGood) == bigCM.ResourceVersion && reasonIs(c, "Active") && st.Error == ""
	})
	if got, _ := n.Target(); got != big {
		t.Fatalf("target file after recovery: %d bytes, want the %d-byte config", len(got), len(big))
	}

	n.Checkpointd.Kill()
	if err := n.Checkpointd.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := proc.WaitFor(10*time.Second, func() (bool, error) {
		r, err := n.Checkpoint().GetRecords(e.ctx, &nodeconfigv1.GetRecordsRequest{})
		return err == nil && r.GetRecords().GetLastKnownGood().GetSource().GetResourceVersion() == bigCM.ResourceVersion, nil
	}); err != nil {
		t.Fatalf("store after the disk-full episode and a hard kill: %v\n%s", err, n.Checkpointd.Tail(2000))
	}
}
