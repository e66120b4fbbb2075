package integration

import (
	"bufio"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"nodeconfig.io/test/framework/proc"
)

// localRun is 'make run' (test/cmd/localrun) started headless with two
// nodes and a 5 s soak, as far as "ready".
type localRun struct {
	root, state string
	cmd         *exec.Cmd
	exited      chan struct{}
	exitErr     error

	mu          sync.Mutex
	commands    []string          // the "$ ..." lines it printed
	targetFiles map[string]string // each node's materialized file, as it printed it
}

// targetLine is localrun's line naming a node's materialized file.
var targetLine = regexp.MustCompile(`\bnode (\S+): .*, target file (\S+)$`)

// startLocalRun builds and starts localrun with its state in state and
// waits until it says ready. Cleanup kills it if the test did not stop it.
func startLocalRun(t *testing.T, state string) *localRun {
	t.Helper()
	root, err := proc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	binDir, err := proc.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	if conn, err := net.DialTimeout("tcp", makeRunReconciler, time.Second); err == nil {
		conn.Close()
		t.Fatalf("%s is taken: another 'make run' is running", makeRunReconciler)
	}
	localrun := filepath.Join(state, "localrun")
	if out, err := exec.Command("go", "build", "-o", localrun, "nodeconfig.io/test/cmd/localrun").CombinedOutput(); err != nil {
		t.Fatalf("build localrun: %v\n%s", err, out)
	}
	r := &localRun{root: root, state: state, exited: make(chan struct{}), targetFiles: map[string]string{}}
	r.cmd = exec.Command(localrun, "--nodes", "2", "--state", state, "--bin", binDir, "--soak-seconds", "5")
	r.cmd.Dir = root
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(state, "localrun.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	r.cmd.Stderr = logf
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(io.TeeReader(stdout, logf))
		for sc.Scan() {
			line := sc.Text()
			if c, ok := strings.CutPrefix(line, "  $ "); ok {
				r.mu.Lock()
				r.commands = append(r.commands, c)
				r.mu.Unlock()
			}
			if m := targetLine.FindStringSubmatch(line); m != nil {
				r.mu.Lock()
				r.targetFiles[m[1]] = m[2]
				r.mu.Unlock()
			}
			if line == "ready" {
				close(ready)
			}
		}
		r.exitErr = r.cmd.Wait()
		close(r.exited)
	}()
	t.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("localrun output:\n%s", b)
		}
	})
	select {
	case <-ready:
	case <-r.exited:
		t.Fatalf("localrun exited before ready: %v", r.exitErr)
	case <-time.After(2 * time.Minute):
		t.Fatal("localrun not ready within 2 minutes")
	}
	return r
}

// printed is the commands localrun printed for a person to try.
func (r *localRun) printed() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.commands...)
}

// targetFile is the file node's checkpointd materializes, as localrun
// named it ("" when it named none).
func (r *localRun) targetFile(node string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.targetFiles[node]
}

// kubeconfig is the run's admin kubeconfig.
func (r *localRun) kubeconfig() string { return filepath.Join(r.state, "kubeconfig") }

// ctrlC stops the run as a person does and says how it ended.
func (r *localRun) ctrlC() error {
	if err := r.cmd.Process.Signal(syscall.SIGINT); err != nil {
		return err
	}
	select {
	case <-r.exited:
		return r.exitErr
	case <-time.After(60 * time.Second):
		_ = r.cmd.Process.Kill()
		return errNotStopped
	}
}

var errNotStopped = errorString("localrun did not stop within 60s of Ctrl-C")

type errorString string

func (e errorString) Error() string { return string(e) }
