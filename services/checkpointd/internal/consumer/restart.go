// Package consumer makes the node's consumer of the config file (the
// kubelet) pick up a new file and tells whether it runs healthy on it: a
// Restarter restarts it, a Prober asks its health endpoint, and a Gate drives
// both after every change of the file and through the soak.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/dbus"
	"github.com/prometheus/procfs"
)

// Restarter makes the consumer reread its config.
type Restarter interface {
	Restart(ctx context.Context) error
	String() string
}

// None leaves the consumer alone: for a consumer that rereads the file by itself.
type None struct{}

func (None) Restart(context.Context) error { return nil }
func (None) String() string                { return "none" }

// Signal sends SIGTERM to the consumer, found by its pid file or, without
// one, by its executable's name, and waits until that process is gone; its
// babysitter (systemd's Restart=always, as kubeadm installs the kubelet)
// starts it again. This is how Dynamic Kubelet Config's kubelet restarted.
type Signal struct {
	PidFile string
	Exe     string
	// Proc is the /proc to search for Exe (the host's, with hostPID).
	Proc string
	// Timeout bounds the wait for the old process to exit.
	Timeout time.Duration
}

func (s Signal) String() string {
	if s.PidFile != "" {
		return "signal (pid file " + s.PidFile + ")"
	}
	return "signal (executable " + s.Exe + ")"
}

// ExeName is the executable the consumer is found by, "" where a pid file
// names it.
func (s Signal) ExeName() string {
	if s.PidFile != "" {
		return ""
	}
	return s.Exe
}

// Restart signals the running consumer. A consumer that is not running (it
// crashed, or its babysitter is between two starts) needs no signal: it
// reads the file when it starts.
func (s Signal) Restart(ctx context.Context) error {
	pid, err := s.find()
	if err != nil {
		return err
	}
	if pid == 0 {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		return fmt.Errorf("SIGTERM to the consumer (pid %d): %w", pid, err)
	}
	timeout := s.Timeout
	if timeout == 0 {
		timeout = time.Minute
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return nil
		}
		// A zombie whose parent has not reaped it yet has exited too.
		if st, err := os.ReadFile(filepath.Join(s.proc(), strconv.Itoa(pid), "stat")); err == nil && zombie(string(st)) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("the consumer (pid %d) did not exit within %s of SIGTERM", pid, timeout)
		case <-tick.C:
		}
	}
}

func zombie(stat string) bool {
	// "pid (comm) S ...": the state follows the last ')'.
	i := strings.LastIndexByte(stat, ')')
	return i >= 0 && len(stat) > i+2 && stat[i+2] == 'Z'
}

func (s Signal) proc() string {
	if s.Proc != "" {
		return s.Proc
	}
	return "/proc"
}

// Instance names the consumer's running process by its pid and start time
// ("" when none runs), so a crash loop shows as new instances.
func (s Signal) Instance() (string, error) {
	pid, st, err := s.stat()
	if err != nil || st == nil {
		return "", err
	}
	return fmt.Sprintf("%d@%d", pid, st.Starttime), nil
}

// StartTime is when the consumer's running process started (zero when none
// runs), from its start in clock ticks after the host's boot.
func (s Signal) StartTime() (time.Time, error) {
	_, st, err := s.stat()
	if err != nil || st == nil {
		return time.Time{}, err
	}
	secs, err := st.StartTime()
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(0, int64(secs*float64(time.Second))), nil
}

// stat reads the running consumer's /proc stat; nil when none runs (or it
// exited while being read).
func (s Signal) stat() (int, *procfs.ProcStat, error) {
	pid, err := s.find()
	if err != nil || pid == 0 {
		return 0, nil, err
	}
	fs, err := procfs.NewFS(s.proc())
	if err != nil {
		return 0, nil, err
	}
	p, err := fs.Proc(pid)
	if err != nil {
		return 0, nil, nil
	}
	st, err := p.Stat()
	if err != nil {
		return 0, nil, nil
	}
	return pid, &st, nil
}

// find returns the consumer's pid, 0 when it is not running.
func (s Signal) find() (int, error) {
	if s.PidFile != "" {
		buf, err := os.ReadFile(s.PidFile)
		if errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
		if err != nil {
			return 0, fmt.Errorf("consumer pid file: %w", err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(buf)))
		if err != nil || pid <= 0 {
			return 0, fmt.Errorf("consumer pid file %s holds %q, not a pid", s.PidFile, strings.TrimSpace(string(buf)))
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return 0, nil
		}
		return pid, nil
	}
	fs, err := procfs.NewFS(s.proc())
	if err != nil {
		return 0, err
	}
	procs, err := fs.AllProcs()
	if err != nil {
		return 0, err
	}
	found := 0
	for _, p := range procs {
		args, err := p.CmdLine()
		if err != nil || len(args) == 0 {
			continue
		}
		if filepath.Base(args[0]) == s.Exe || args[0] == s.Exe {
			if found != 0 {
				return 0, fmt.Errorf("more than one process runs %s (pids %d and %d): name it with a pid file", s.Exe, found, p.PID)
			}
			found = p.PID
		}
	}
	return found, nil
}

// Systemd restarts a unit through the host's system bus, as an operator's
// `systemctl restart kubelet` does.
type Systemd struct {
	Unit string
	// Connect opens the bus; nil means the system bus.
	Connect func(ctx context.Context) (*dbus.Conn, error)
}

func (s Systemd) String() string { return "systemd (unit " + s.Unit + ")" }

// Restart asks systemd to restart the unit and waits for the job's result.
func (s Systemd) Restart(ctx context.Context) error {
	connect := s.Connect
	if connect == nil {
		connect = dbus.NewSystemConnectionContext
	}
	conn, err := connect(ctx)
	if err != nil {
		return fmt.Errorf("connect to the system bus: %w", err)
	}
	defer conn.Close()
	done := make(chan string, 1)
	if _, err := conn.RestartUnitContext(ctx, s.Unit, "replace", done); err != nil {
		return fmt.Errorf("restart unit %s: %w", s.Unit, err)
	}
	select {
	case result := <-done:
		if result != "done" {
			return fmt.Errorf("restart unit %s: job %s", s.Unit, result)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("restart unit %s: %w", s.Unit, ctx.Err())
	}
}
