package consumer

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"nodeconfig.io/services/servekit/atomicfile"
)

// testCgroup creates a cgroup for a stand-in kubelet, as systemd creates
// kubelet.service's. It returns its directory and its path as
// /proc/<pid>/cgroup shows it; when the test ends, whatever runs in it is
// killed and it is removed.
func testCgroup(t *testing.T) (dir, shown string) {
	return makeCgroup(t, "kubelet.service")
}

// makeCgroup creates the cgroup rel under a top-level cgroup of its own, on
// the cgroup2 hierarchy (or, on a host without one, the v1 pids hierarchy),
// and removes both when the test ends, killing what runs in rel.
func makeCgroup(t *testing.T, rel string) (dir, shown string) {
	t.Helper()
	mounts, err := procfs.GetMounts()
	if err != nil {
		t.Fatal(err)
	}
	var hierarchy *procfs.MountInfo
	for _, m := range mounts {
		if m.FSType == "cgroup2" {
			hierarchy = m
			break
		}
		if _, pids := m.SuperOptions["pids"]; m.FSType == "cgroup" && pids && hierarchy == nil {
			hierarchy = m
		}
	}
	if hierarchy == nil {
		t.Fatal("no cgroup2 or cgroup v1 pids hierarchy is mounted: the consumer is found by its cgroup, and the tests need one to put a stand-in kubelet in")
	}
	top := fmt.Sprintf("nodeconfig-consumer-test-%d-%08x", os.Getpid(), rand.Uint32())
	rel = filepath.Join(top, rel)
	dir = filepath.Join(hierarchy.MountPoint, rel)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("create a test cgroup (the consumer's tests need root): %v", err)
	}
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			pids := cgroupPids(t, dir)
			if len(pids) == 0 || time.Now().After(deadline) {
				break
			}
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			time.Sleep(20 * time.Millisecond)
		}
		for d := rel; d != "."; d = filepath.Dir(d) {
			if err := syscall.Rmdir(filepath.Join(hierarchy.MountPoint, d)); err != nil && !errors.Is(err, syscall.ENOENT) {
				t.Errorf("remove the test cgroup %s: %v", d, err)
			}
		}
	})
	return dir, path.Join(hierarchy.Root, rel)
}

func cgroupPids(t *testing.T, dir string) []int {
	buf, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(buf)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// standIn copies the program at from to dir/name: a stand-in kubelet (or a
// decoy) whose executable is its own file.
func standIn(t *testing.T, dir, from, name string) string {
	t.Helper()
	if p, err := exec.LookPath(from); err == nil {
		from = p
	}
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	to := filepath.Join(dir, name)
	if err := atomicfile.WriteFrom(to, src, 0o755, 0o755); err != nil {
		t.Fatal(err)
	}
	return to
}

// running is a started process and whether it has exited.
type running struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func (r *running) pid() int { return r.cmd.Process.Pid }

func (r *running) alive() bool {
	select {
	case <-r.exited:
		return false
	default:
		return true
	}
}

// signalledBy is the signal that ended it, 0 while it runs or when it
// exited by itself.
func (r *running) signalledBy() syscall.Signal {
	if r.alive() {
		return 0
	}
	if ws, ok := r.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal()
	}
	return 0
}

// waitExit waits for it to exit, up to d.
func (r *running) waitExit(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-r.exited:
	case <-time.After(d):
		t.Fatalf("process %d (%s) still runs %s on", r.pid(), r.cmd.Args[0], d)
	}
}

// start runs exe with argv[0] argv0 (as systemd runs the kubelet: its full
// path) and args; in the cgroup directory cgroupDir when it is not empty,
// from its start, as systemd starts a unit's process (through a shell that
// joins the cgroup and executes exe, whose argv[0] is then exe). It is
// killed when the test ends.
func start(t *testing.T, exe, argv0, cgroupDir string, args ...string) *running {
	t.Helper()
	cmd := &exec.Cmd{Path: exe, Args: append([]string{argv0}, args...)}
	if cgroupDir != "" {
		if argv0 != exe {
			t.Fatalf("a process started in a cgroup runs by its path, not %s", argv0)
		}
		sh, err := exec.LookPath("sh")
		if err != nil {
			t.Fatal(err)
		}
		join := `echo $$ > "$0/cgroup.procs" && exec "$@"`
		cmd = &exec.Cmd{Path: sh, Args: append([]string{"sh", "-c", join, cgroupDir, exe}, args...)}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &running{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(r.exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-r.exited })
	if cgroupDir != "" {
		// Started once it runs exe in the cgroup.
		if err := waitFor(10*time.Second, func() bool {
			got, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(r.pid()), "exe"))
			return got == exe && slices.Contains(cgroupPids(t, cgroupDir), r.pid())
		}); err != nil {
			t.Fatalf("process %d running %s in %s: %v", r.pid(), exe, cgroupDir, err)
		}
	}
	return r
}
