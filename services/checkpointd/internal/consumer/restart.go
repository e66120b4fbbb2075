// Package consumer makes the node's consumer of the config file (the
// kubelet) pick up a new file and tells whether it runs healthy on it: a
// Restarter restarts it, a Prober asks its health endpoint, and a Gate drives
// both after every change of the file and through the soak.
//
// Signal finds the kubelet among the host's processes, where any pod can
// start one called kubelet. Its cgroup is the proof: only the host's root
// puts a process in kubelet.service's. Its executable tells it from the
// helpers it runs there: /proc/<pid>/exe where the kernel shows it, and
// where it does not (to this agent, which has no capabilities, it hides the
// kubelet's, which has them all) the path the kubelet was started by.
// CAP_SYS_PTRACE would show it, and would also let the agent read the
// memory of every process on the host.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coreos/go-systemd/v22/dbus"
	"golang.org/x/sys/unix"
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

// Signal sends SIGTERM to the consumer and waits until that process is gone;
// its babysitter (systemd's Restart=always, as kubeadm installs the kubelet)
// starts it again. This is how Dynamic Kubelet Config's kubelet restarted.
//
// The consumer is the process in Cgroup that runs ExePath, or the one its
// pid file names (and, where set, in Cgroup running ExePath); its name
// proves nothing. It is signalled through a pidfd, opened before its
// identity is read again, so a process that took its pid in between is
// never signalled.
type Signal struct {
	PidFile string
	// Cgroup is the consumer's cgroup as /proc/<pid>/cgroup shows it on the
	// host, on any hierarchy (kubeadm's kubelet: /system.slice/kubelet.service).
	Cgroup string
	// ExePath is the consumer's executable, as its unit starts it
	// (kubeadm's kubelet: /usr/bin/kubelet).
	ExePath string
	// Proc is the /proc to search (the host's, with hostPID).
	Proc string
	// Timeout bounds the wait for the old process to exit.
	Timeout time.Duration
}

func (s Signal) String() string {
	if s.PidFile != "" {
		return "signal (pid file " + s.PidFile + ")"
	}
	return "signal (" + s.Identity() + ")"
}

// Identity is what the consumer is found by, "" where a pid file names it.
func (s Signal) Identity() string {
	if s.PidFile != "" {
		return ""
	}
	return s.ExePath + " in cgroup " + s.Cgroup
}

// Restart signals the running consumer. A consumer that is not running (it
// crashed, or its babysitter is between two starts) needs no signal: it
// reads the file when it starts.
func (s Signal) Restart(ctx context.Context) error {
	p, ok, err := s.find()
	if err != nil || !ok {
		return err
	}
	testHookFound(p.PID)
	fd, err := unix.PidfdOpen(p.PID, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pidfd_open of the consumer (pid %d): %w", p.PID, err)
	}
	defer unix.Close(fd)
	// The consumer may have exited since it was found and its pid gone to
	// another process: fd is the consumer only if the pid still names the
	// same process. Should that one exit before the signal, the signal
	// fails rather than reaching a successor.
	h, err := s.host()
	if err != nil {
		return err
	}
	if now, ok := s.identify(h, p.PID); !ok || now.Starttime != p.Starttime {
		return nil
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGTERM, nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil
		}
		return fmt.Errorf("SIGTERM to the consumer (pid %d): %w", p.PID, err)
	}
	timeout := s.Timeout
	if timeout == 0 {
		timeout = time.Minute
	}
	return awaitExit(ctx, fd, p.PID, timeout)
}

// testHookFound runs between finding the consumer and opening its pidfd:
// where a test gives the consumer's pid to another process.
var testHookFound = func(pid int) {}

// awaitExit waits until the process behind pidfd fd has exited: the pidfd
// turns readable then, zombie or not.
func awaitExit(ctx context.Context, fd, pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 50)
		if n > 0 {
			return nil
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("wait for the consumer (pid %d) to exit: %w", pid, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the consumer (pid %d) did not exit within %s of SIGTERM", pid, timeout)
		}
	}
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
	p, ok, err := s.find()
	if err != nil || !ok {
		return "", err
	}
	return p.String(), nil
}

// StartTime is when the consumer's running process started (zero when none
// runs), from its start in clock ticks after the host's boot.
func (s Signal) StartTime() (time.Time, error) {
	p, ok, err := s.find()
	if err != nil || !ok {
		return time.Time{}, err
	}
	secs, err := p.StartTime()
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(0, int64(secs*float64(time.Second))), nil
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
	conn, err := s.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return job(ctx, s.Unit, "restart", func(done chan<- string) (int, error) { return conn.RestartUnitContext(ctx, s.Unit, "replace", done) })
}
