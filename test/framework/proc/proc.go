// Package proc starts the real binaries of tests and 'make run' as child
// processes with their output in log files, and stops exactly those
// processes again.
package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Process is one started child.
type Process struct {
	Name    string
	Path    string
	Args    []string
	Env     []string
	LogPath string
	// Cgroup, when set, is a cgroup2 directory the process starts in, as
	// systemd starts a unit's process in the unit's cgroup.
	Cgroup string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start starts a binary; its stdout and stderr are appended to logPath.
func Start(name, path string, args []string, logPath string, env ...string) (*Process, error) {
	p := &Process{Name: name, Path: path, Args: args, Env: env, LogPath: logPath}
	return p, p.Restart()
}

// Restart starts the process again with the same arguments (after a Kill
// or Stop).
func (p *Process) Restart() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !p.exited() {
		return fmt.Errorf("%s is still running", p.Name)
	}
	if err := os.MkdirAll(filepath.Dir(p.LogPath), 0o755); err != nil {
		return err
	}
	logf, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "=== %s %s %s\n", time.Now().Format(time.RFC3339Nano), p.Path, strings.Join(p.Args, " "))
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), p.Env...)
	// Children die with the test binary even if it is killed itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if p.Cgroup != "" {
		cg, err := os.Open(p.Cgroup)
		if err != nil {
			logf.Close()
			return fmt.Errorf("start %s in its cgroup: %w", p.Name, err)
		}
		defer cg.Close()
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cg.Fd())
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s (%s): %w", p.Name, p.Path, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.err = cmd, done, nil
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func (p *Process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Running reports whether the process is alive.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !p.exited()
}

// Done is closed when the current run exits.
func (p *Process) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Pid is the current run's process id.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// ExitError is how the last run ended (nil: exit 0).
func (p *Process) ExitError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Kill sends SIGKILL and waits for the exit.
func (p *Process) Kill() {
	p.signal(syscall.SIGKILL)
	<-p.Done()
}

// Stop sends SIGTERM, waits up to grace, then SIGKILL. It returns the exit
// error of a process that stopped by itself within grace.
func (p *Process) Stop(grace time.Duration) error {
	if !p.Running() {
		return nil
	}
	p.signal(syscall.SIGTERM)
	select {
	case <-p.Done():
		return p.ExitError()
	case <-time.After(grace):
		p.Kill()
		return fmt.Errorf("%s did not stop within %s of SIGTERM; killed", p.Name, grace)
	}
}

func (p *Process) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// Tail returns the last n bytes of the log, for failure messages.
func (p *Process) Tail(n int) string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// WaitFor polls cond every 25 ms until it is true or timeout passes. An
// error from cond means "not yet"; the last one explains a timeout.
func WaitFor(timeout time.Duration, cond func() (bool, error)) error {
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 25*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, err := cond()
		last = err
		return ok, nil
	})
	if err == nil {
		return nil
	}
	if last == nil {
		last = errors.New("condition not met")
	}
	return fmt.Errorf("after %s: %w", timeout, last)
}

// RepoRoot finds the directory holding go.work, from the working directory up.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.work not found above the working directory")
		}
		dir = parent
	}
}

// BinDir is where the Makefile puts binaries: $NODECONFIG_BIN or <repo>/bin.
func BinDir() (string, error) {
	if d := os.Getenv("NODECONFIG_BIN"); d != "" {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// companions are the binaries a binary runs from its own directory, as
// make build and the images install them: the reconciler's kubelet
// validator (nodeconfig-kubelet-check), which its --kubelet-check-binary
// finds there by default.
var companions = map[string][]string{"reconciler": {"nodeconfig-kubelet-check"}}

// Binary returns the path of a built binary, or an error telling how to
// build it (or the binaries it runs beside it).
func Binary(name string) (string, error) {
	dir, err := BinDir()
	if err != nil {
		return "", err
	}
	for _, n := range append([]string{name}, companions[name]...) {
		path := filepath.Join(dir, n)
		if _, err := os.Stat(path); err != nil {
			hint := "make build"
			if n == "kube-apiserver" || n == "etcd" {
				hint = "make testbin"
			}
			if n != name {
				return "", fmt.Errorf("%s runs %s from its directory, not found at %s: run '%s' first ('make test' does it)", name, n, path, hint)
			}
			return "", fmt.Errorf("%s not found at %s: run '%s' first ('make test' does it)", name, path, hint)
		}
	}
	return filepath.Join(dir, name), nil
}

// MakeAsTyped is make with args run in dir as a person types it at a
// terminal: not a sub-make of the 'make test' running the tests (their
// MAKEFLAGS and level dropped), in a process group of its own, as a
// terminal's foreground job, so that a Ctrl-C goes to the group.
func MakeAsTyped(ctx context.Context, dir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "make", args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES":
		default:
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}
