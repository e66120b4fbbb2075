package realnode_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"nodeconfig.io/services/servekit/atomicfile"
	"nodeconfig.io/test/realnode"
)

// decoyKubelet is a process any pod could start to pose as the kubelet:
// called kubelet, started by the kubelet's path, running as root, outside
// the kubelet's cgroup.
type decoyKubelet struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// startDecoyKubelet starts a copy of sleep as the decoy; it is killed when
// the test ends.
func startDecoyKubelet(t *testing.T) *decoyKubelet {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(t.TempDir(), "kubelet")
	src, err := os.Open(sleep)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if err := atomicfile.WriteFrom(exe, src, 0o755, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := &exec.Cmd{Path: exe, Args: []string{realnode.KubeletBinary, "infinity"}}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &decoyKubelet{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(d.exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-d.exited })
	return d
}

// checkNeverSignalled fails the test if the decoy was stopped.
func (d *decoyKubelet) checkNeverSignalled(t *testing.T) {
	t.Helper()
	select {
	case <-d.exited:
		t.Errorf("the decoy kubelet (pid %d) was stopped: %v", d.cmd.Process.Pid, d.cmd.ProcessState)
	default:
	}
}
