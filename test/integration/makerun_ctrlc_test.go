package integration

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"nodeconfig.io/test/framework/hostsnapshot"
	"nodeconfig.io/test/framework/proc"
)

// makeError is the line GNU make prints when a recipe fails ("make: ***
// [Makefile:100: run] Error 1") or dies of a signal ("... Interrupt").
var makeError = regexp.MustCompile(`^make(\[\d+\])?: \*\*\*`)

// Ctrl-C, the documented way to stop 'make run', is no failure: the
// terminal sends SIGINT to the foreground process group (make, the
// recipe, localrun and what it started); localrun cleans up and exits 0, so
// make prints no "make: *** [Makefile:N: run] Error 1" — as it would if
// the recipe were 'go run', which exits 1 after a Ctrl-C even when the
// program exits 0. make itself then ends by the SIGINT it received: GNU make
// re-raises it once its children are done (a shell reports 130, and prints
// nothing), so that is the one status accepted besides 0.
//
// It runs 'make -s run NODES=1' as typed, with BIN pointing at a directory
// of its own: make run rebuilds the services into BIN, and the other test
// packages run the binaries of ./bin meanwhile. kube-apiserver, etcd and the
// tools are linked from ./bin, so make rebuilds none of them. It uses the
// fixed ports of every local run (7601 to 7603), like
// TestMakeRunCommandsWorkAsPrinted: the package's tests run one at a time.
func TestMakeRunCtrlCExitsWithoutMakeError(t *testing.T) {
	root, err := proc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	shared, err := proc.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"127.0.0.1:7601", "127.0.0.1:7602", "127.0.0.1:7603"} {
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			t.Fatalf("%s is taken: another 'make run' is running", addr)
		}
	}
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kube-apiserver", "etcd", "buf", "protoc-gen-go", "protoc-gen-go-grpc", "grpcurl"} {
		target := filepath.Join(shared, name)
		if _, err := os.Stat(target); err != nil {
			t.Fatalf("%v: run 'make testbin tools' first", err)
		}
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	// make run keeps its state in .run at the root; one this test creates
	// goes with it.
	state := filepath.Join(root, ".run")
	if _, err := os.Stat(state); errors.Is(err, os.ErrNotExist) {
		t.Cleanup(func() { _ = os.RemoveAll(state) })
	}

	// Its processes are those naming its BIN or state directory: make,
	// localrun, and what localrun starts from BIN.
	scope := hostsnapshot.Scope{Marks: []string{bin, state}}
	before, err := hostsnapshot.Take(scope)
	if err != nil {
		t.Fatal(err)
	}

	cmd := proc.MakeAsTyped(context.Background(), root, "-s", "run", "NODES=1", "BIN="+bin)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	group := cmd.Process.Pid

	var mu sync.Mutex
	var lines []string
	output := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), lines...)
	}
	ready, read := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
			if sc.Text() == "ready" {
				close(ready)
			}
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = syscall.Kill(-group, syscall.SIGKILL)
			<-exited
		}
		if t.Failed() {
			t.Logf("make run output:\n%s", strings.Join(output(), "\n"))
		}
	})

	select {
	case <-ready:
	case err := <-exited:
		stopped = true
		t.Fatalf("make run exited before ready: %v", err)
	case <-time.After(5 * time.Minute):
		t.Fatal("make run not ready within 5 minutes")
	}

	// Every port the run listens on (the services', etcd's, the API
	// server's), by the sockets its processes hold.
	listening, holders := runListeners(t, group)
	t.Logf("make run listens on %v", listening)
	for _, addr := range []string{"127.0.0.1:7601", "127.0.0.1:7602", "127.0.0.1:7603"} {
		if !slices.Contains(listening, addr) {
			t.Errorf("%s is not among the ports found (the search misses some)", addr)
		}
	}
	for _, name := range []string{"etcd", "kube-apiserver"} {
		if !holders[name] {
			t.Errorf("no port of %s among those found (the search misses some): %v", name, holders)
		}
	}

	// Ctrl-C.
	if err := syscall.Kill(-group, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-exited:
		stopped = true
	case <-time.After(60 * time.Second):
		t.Fatal("make run did not stop within 60s of Ctrl-C")
	}
	t.Logf("make run after Ctrl-C: %v", cmp.Or(err, error(errors.New("exit status 0"))))
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGINT {
			t.Errorf("make run ended with %v after Ctrl-C; want exit 0 or the SIGINT itself", err)
		}
	default:
		t.Fatal(err)
	}
	// The last lines are in the pipe (a process it left behind could hold
	// it open: do not wait for that).
	select {
	case <-read:
	case <-time.After(5 * time.Second):
	}
	out := output()
	clean := false
	for _, line := range out {
		if makeError.MatchString(line) || strings.Contains(line, "Error") {
			t.Errorf("make run printed after Ctrl-C: %q", line)
		}
		if strings.HasPrefix(line, "error:") {
			t.Errorf("localrun failed: %q", line)
		}
		if strings.HasSuffix(line, "stopping everything this run started") {
			clean = true
		}
	}
	if !clean {
		t.Error("localrun never said it was stopping what it started")
	}
	// The run stopped everything it started: no port of it is listened
	// on (by anyone), no process of it runs.
	after, err := hostsnapshot.Listeners()
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range listening {
		for _, l := range after {
			if l.Addr == addr {
				t.Errorf("%s still listened on after Ctrl-C, by %s", addr, cmp.Or(l.Process, "an unknown process"))
			}
		}
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			t.Errorf("%s still accepts connections after Ctrl-C", addr)
		}
	}
	snap, err := hostsnapshot.Take(scope)
	if err != nil {
		t.Fatal(err)
	}
	// Processes only: make run changes nothing else on the host, and other
	// users of the machine change mounts and links meanwhile.
	for _, d := range before.Diff(snap) {
		if strings.HasPrefix(d, "process ") {
			t.Errorf("after Ctrl-C: %s", d)
		}
	}
}

// runListeners lists the TCP addresses the processes of the group leader's
// tree listen on, and the names of the executables that hold them: the
// ports that must be free after the run.
func runListeners(t *testing.T, leader int) (addrs []string, holders map[string]bool) {
	t.Helper()
	tree, err := hostsnapshot.Tree(leader)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := hostsnapshot.Listeners()
	if err != nil {
		t.Fatal(err)
	}
	holders = map[string]bool{}
	for _, l := range ls {
		if slices.ContainsFunc(l.PIDs, func(p int) bool { return tree[p] }) {
			addrs = append(addrs, l.Addr)
			holders[filepath.Base(l.Process)] = true
		}
	}
	return addrs, holders
}
