package consumer

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// kubeletOnHost is a stand-in kubelet's executable under a host-like tree
// and decoys of it elsewhere: copies of sleep, so each is its own file.
type kubeletOnHost struct {
	cgroupDir string
	signal    Signal
	// exe is the stand-in kubelet's path (argv[0] as systemd starts it).
	exe string
	// otherExe is another program called kubelet.
	otherExe string
	// helper is a program the kubelet runs in its cgroup (a mount helper).
	helper string
}

func newKubeletOnHost(t *testing.T) *kubeletOnHost {
	t.Helper()
	dir, shown := testCgroup(t)
	tmp := t.TempDir()
	k := &kubeletOnHost{
		cgroupDir: dir,
		exe:       standIn(t, filepath.Join(tmp, "usr", "bin"), "sleep", "kubelet"),
		otherExe:  standIn(t, filepath.Join(tmp, "pod", "usr", "bin"), "sleep", "kubelet"),
		helper:    standIn(t, filepath.Join(tmp, "usr", "bin"), "sleep", "mount"),
	}
	k.signal = Signal{Cgroup: shown, ExePath: k.exe, Timeout: 10 * time.Second}
	return k
}

// kubelet starts the kubelet in its cgroup, as its babysitter does.
func (k *kubeletOnHost) kubelet(t *testing.T) *running {
	return start(t, k.exe, k.exe, k.cgroupDir, "600")
}

// decoys start, outside the kubelet's cgroup, processes a pod could run to
// pose as it: the kubelet's own executable under its own name, and another
// program called kubelet started by the kubelet's path.
func (k *kubeletOnHost) decoys(t *testing.T) []*running {
	return []*running{
		start(t, k.exe, k.exe, "", "600"),
		start(t, k.otherExe, k.exe, "", "600"),
	}
}

func allAlive(t *testing.T, what string, rs ...*running) {
	t.Helper()
	for _, r := range rs {
		if !r.alive() {
			t.Errorf("%s %d (%s) was stopped (signal %v)", what, r.pid(), r.cmd.Path, r.signalledBy())
		}
	}
}

// The kubelet is the process in its cgroup running its executable: no
// process elsewhere counts or is signalled, whatever it is called or runs,
// and neither do the helpers the kubelet runs in its cgroup.
func TestSignalFindsTheKubeletByItsCgroupAndExecutable(t *testing.T) {
	k := newKubeletOnHost(t)
	decoys := k.decoys(t)
	helper := start(t, k.helper, k.helper, k.cgroupDir, "600")

	// Decoys and a helper alone: no kubelet runs, which is no error.
	if id, err := k.signal.Instance(); id != "" || err != nil {
		t.Fatalf("Instance with only decoys = %q, %v; want none", id, err)
	}
	if st, err := k.signal.StartTime(); !st.IsZero() || err != nil {
		t.Fatalf("StartTime with only decoys = %v, %v; want zero", st, err)
	}
	if err := k.signal.Restart(context.Background()); err != nil {
		t.Fatalf("Restart with only decoys: %v", err)
	}
	allAlive(t, "decoy", decoys...)
	allAlive(t, "helper", helper)

	kubelet := k.kubelet(t)
	id, err := k.signal.Instance()
	if err != nil || !strings.HasPrefix(id, strconv.Itoa(kubelet.pid())+"@") {
		t.Fatalf("Instance = %q, %v; want the kubelet, pid %d", id, err, kubelet.pid())
	}
	if err := k.signal.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Restart returns once the kubelet has exited: no wait here.
	if kubelet.alive() {
		<-kubelet.exited
	}
	if sig := kubelet.signalledBy(); sig != syscall.SIGTERM {
		t.Fatalf("the kubelet ended by signal %v, want SIGTERM", sig)
	}
	allAlive(t, "decoy", decoys...)
	allAlive(t, "helper", helper)
}

// A program the kubelet forks is the kubelet's copy until it executes its
// own: in the kubelet's cgroup, running the kubelet's executable under the
// kubelet's command line. It is neither a second kubelet nor signalled.
func TestSignalTellsTheKubeletFromItsForkedCopies(t *testing.T) {
	dir, shown := testCgroup(t)
	// A shell called kubelet whose subshell is its copy, waiting on sleep.
	exe := standIn(t, filepath.Join(t.TempDir(), "usr", "bin"), "sh", "kubelet")
	kubelet := start(t, exe, exe, dir, "-c", "( sleep 600; : ) & sleep 600; :")
	var copyPid int
	if err := waitFor(10*time.Second, func() bool {
		copyPid = childRunning(t, kubelet.pid(), exe)
		return copyPid != 0
	}); err != nil {
		t.Fatalf("the stand-in kubelet's subshell: %v", err)
	}
	s := Signal{Cgroup: shown, ExePath: exe, Timeout: 10 * time.Second}
	id, err := s.Instance()
	if err != nil || !strings.HasPrefix(id, strconv.Itoa(kubelet.pid())+"@") {
		t.Fatalf("Instance = %q, %v; want the kubelet, pid %d, not its copy %d", id, err, kubelet.pid(), copyPid)
	}
	if err := s.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if kubelet.alive() {
		<-kubelet.exited
	}
	if err := syscall.Kill(copyPid, 0); err != nil {
		t.Fatalf("the kubelet's copy %d was stopped too: %v", copyPid, err)
	}
}

// childRunning is the pid of a child of parent that runs exe, 0 for none.
func childRunning(t *testing.T, parent int, exe string) int {
	tasks, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
		if len(fields) < 2 || fields[1] != strconv.Itoa(parent) {
			continue
		}
		if got, _ := os.Readlink(filepath.Join(filepath.Dir(f), "exe")); got == exe {
			return pid
		}
	}
	return 0
}

// waitFor polls cond every 10 ms until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("not within " + d.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// childEnv marks a run of this test binary as a test's child, naming what
// it does.
const childEnv = "NODECONFIG_CONSUMER_TEST_CHILD"

// runChild runs this test binary's test named by the caller as a child with
// env, through wrap (a command line it runs under, or none) and with attr,
// and fails the test with the child's output when it fails.
func runChild(t *testing.T, test string, env map[string]string, attr *syscall.SysProcAttr, wrap ...string) {
	t.Helper()
	args := append(wrap, os.Args[0], "-test.run=^"+test+"$", "-test.v", "-test.count=1")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), childEnv+"="+test)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = attr
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+test) {
		t.Fatalf("the child %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// The agent runs in a pod: in a cgroup namespace of its own, which shows it
// the kubelet's cgroup relative to its own, and without capabilities, so
// the kernel refuses it the executable of the kubelet, which has them all.
// Inside the kubelet's cgroup the name it was started by stands in;
// outside, nothing counts, even a process started by the kubelet's path.
func TestSignalFindsTheKubeletFromAPod(t *testing.T) {
	if os.Getenv(childEnv) == t.Name() {
		restartFromAPod(t)
		return
	}
	var tools []string
	for _, tool := range []string{"sh", "unshare", "setpriv"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatalf("%s (util-linux) is missing: it starts the agent's stand-in as a pod", tool)
		}
		tools = append(tools, p)
	}
	k := newKubeletOnHost(t)
	decoys := k.decoys(t)
	kubelet := k.kubelet(t)
	pod, _ := makeCgroup(t, "kubepods/pod1/agent")
	runChild(t, t.Name(), map[string]string{
		"CGROUP": k.signal.Cgroup, "EXE": k.exe, "KUBELET_PID": strconv.Itoa(kubelet.pid()),
	}, nil,
		tools[0], "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, pod,
		tools[1], "--cgroup", "--",
		tools[2], "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--")
	kubelet.waitExit(t, 10*time.Second)
	if sig := kubelet.signalledBy(); sig != syscall.SIGTERM {
		t.Fatalf("the kubelet ended by signal %v, want SIGTERM", sig)
	}
	allAlive(t, "decoy", decoys...)
}

// restartFromAPod is the agent: it finds the kubelet and restarts it.
func restartFromAPod(t *testing.T) {
	pid := os.Getenv("KUBELET_PID")
	if _, err := os.Readlink("/proc/" + pid + "/exe"); !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("reading the kubelet's executable without capabilities: %v; want it refused", err)
	}
	if b, err := os.ReadFile("/proc/" + pid + "/cgroup"); err != nil || !strings.Contains(string(b), ":/../") {
		t.Fatalf("the kubelet's cgroups %q, %v; want them relative to this namespace's", b, err)
	}
	s := Signal{Cgroup: os.Getenv("CGROUP"), ExePath: os.Getenv("EXE"), Timeout: 10 * time.Second}
	if id, err := s.Instance(); err != nil || !strings.HasPrefix(id, pid+"@") {
		t.Fatalf("Instance = %q, %v; want the kubelet, pid %s", id, err, pid)
	}
	if err := s.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A kubelet that exits after it was found, its pid taken by a decoy before
// the signal: the decoy is not signalled. The child runs in a pid namespace
// of its own, where it chooses the decoy's pid.
func TestSignalNeverSignalsAProcessThatTookTheKubeletsPid(t *testing.T) {
	if os.Getenv(childEnv) == t.Name() {
		pidTakenBetweenFindAndSignal(t)
		return
	}
	k := newKubeletOnHost(t)
	runChild(t, t.Name(), map[string]string{
		"CGROUP": k.signal.Cgroup, "CGROUP_DIR": k.cgroupDir, "EXE": k.exe,
	}, &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL})
}

func pidTakenBetweenFindAndSignal(t *testing.T) {
	// This pid namespace's own /proc, in this mount namespace only.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("proc", "/proc", "proc", 0, ""); err != nil {
		t.Fatal(err)
	}
	exe := os.Getenv("EXE")
	kubelet := start(t, exe, exe, os.Getenv("CGROUP_DIR"), "600")
	var decoy *running
	testHookFound = func(pid int) {
		if pid != kubelet.pid() {
			t.Errorf("found pid %d, want the kubelet's %d", pid, kubelet.pid())
			return
		}
		_ = kubelet.cmd.Process.Kill()
		<-kubelet.exited
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0o644); err != nil {
			t.Fatal(err)
		}
		decoy = start(t, exe, exe, "", "600")
		if decoy.pid() != pid {
			t.Fatalf("the decoy got pid %d, want the kubelet's %d", decoy.pid(), pid)
		}
	}
	t.Cleanup(func() { testHookFound = func(int) {} })
	s := Signal{Cgroup: os.Getenv("CGROUP"), ExePath: exe, Timeout: 10 * time.Second}
	if err := s.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if decoy == nil {
		t.Fatal("Restart found no kubelet")
	}
	allAlive(t, "decoy with the kubelet's pid", decoy)
}

// A pid file names the kubelet only where the process is in its cgroup
// and runs its executable, where they are set: a stale file whose pid went
// to a pod's process names no kubelet.
func TestSignalChecksTheProcessAPidFileNames(t *testing.T) {
	k := newKubeletOnHost(t)
	decoy := k.decoys(t)[0]
	s := k.signal
	s.PidFile = filepath.Join(t.TempDir(), "kubelet.pid")
	if err := os.WriteFile(s.PidFile, []byte(strconv.Itoa(decoy.pid())), 0o644); err != nil {
		t.Fatal(err)
	}
	if id, err := s.Instance(); id != "" || err != nil {
		t.Fatalf("Instance of a decoy named by the pid file = %q, %v; want none", id, err)
	}
	if err := s.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	allAlive(t, "decoy", decoy)
	kubelet := k.kubelet(t)
	if err := os.WriteFile(s.PidFile, []byte(strconv.Itoa(kubelet.pid())), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if kubelet.alive() {
		<-kubelet.exited
	}
	if sig := kubelet.signalledBy(); sig != syscall.SIGTERM {
		t.Fatalf("the kubelet ended by signal %v, want SIGTERM", sig)
	}
}
