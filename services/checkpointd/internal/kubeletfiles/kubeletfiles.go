// Package kubeletfiles finds where this node's kubelet reads its
// configuration — its --config file and its --config-dir of drop-ins — on
// the running kubelet's command line, so that the agent needs no path of
// the node's layout in its own flags.
package kubeletfiles

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/prometheus/procfs"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
	cliflag "k8s.io/component-base/cli/flag"
)

// Files are the kubelet's configuration files.
type Files struct {
	// Config is its --config file; empty: it has none (its defaults).
	Config string
	// ConfigDir is its --config-dir; empty: it reads no drop-in.
	ConfigDir string
}

// FromCommandLine reads Files from the kubelet's command line (argv, the
// program first) with the kubelet's own flag parser (pflag, with its
// word-separator normalization), its other flags skipped. A relative path
// is resolved against the kubelet's working directory, which cwd is asked
// for only then.
func FromCommandLine(argv []string, cwd func() (string, error)) (Files, error) {
	var f Files
	fs := pflag.NewFlagSet("kubelet", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	fs.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	fs.StringVar(&f.Config, "config", "", "")
	fs.StringVar(&f.ConfigDir, "config-dir", "", "")
	var missing *pflag.ValueRequiredError
	if err := fs.Parse(argv[min(1, len(argv)):]); errors.As(err, &missing) {
		return Files{}, fmt.Errorf("the kubelet's command line ends in --%s with no value", missing.GetSpecifiedName())
	} else if err != nil {
		return Files{}, fmt.Errorf("read the kubelet's command line: %w", err)
	}
	dir := ""
	for _, p := range []struct {
		flag string
		path *string
	}{{"--config", &f.Config}, {"--config-dir", &f.ConfigDir}} {
		if *p.path == "" || filepath.IsAbs(*p.path) {
			*p.path = filepath.Clean(*p.path)
			if *p.path == "." {
				*p.path = ""
			}
			continue
		}
		if dir == "" {
			wd, err := cwd()
			if err == nil && !filepath.IsAbs(wd) {
				// procfs says "" for a process that has none (gone).
				err = fmt.Errorf("none known (%q)", wd)
			}
			if err != nil {
				return Files{}, fmt.Errorf("the kubelet's %s %q is relative and its working directory cannot be read: %w", p.flag, *p.path, err)
			}
			dir = wd
		}
		*p.path = filepath.Join(dir, *p.path)
	}
	return f, nil
}

// ErrNotRunning is a Locate that finds no kubelet process.
var ErrNotRunning = errors.New("the kubelet is not running")

// NoConfigDirError is a kubelet that runs without --config-dir: it reads
// no drop-in, so the node has nowhere to write one.
type NoConfigDirError struct {
	// Suggested is the directory to give it.
	Suggested string
}

func (e *NoConfigDirError) Error() string {
	return fmt.Sprintf("the kubelet runs without --config-dir, so it reads no drop-in and the node writes none: add --config-dir=%s to the kubelet's flags (KUBELET_EXTRA_ARGS) and restart it", e.Suggested)
}

// Locator finds the running kubelet's files.
type Locator struct {
	// Pid finds the kubelet's process (0: none runs).
	Pid func() (int, error)
	// Proc is the host's /proc (the agent runs with hostPID).
	Proc string
	// HostRoot is where the host's file system is mounted in the agent:
	// "/" (or empty) where the agent mounts the kubelet's directories at
	// their own paths.
	HostRoot string
	// SuggestedConfigDir is the --config-dir a kubelet without one is told
	// to add: a host directory the agent has mounted read-write.
	SuggestedConfigDir string
	// Config, when set, is the kubelet's --config file as the agent reads
	// it, in place of the one on its command line.
	Config string
}

// Located is where the kubelet reads its files.
type Located struct {
	// Host is as the host, and the kubelet, sees them.
	Host Files
	// Agent is as the agent reads and writes them: Host under HostRoot.
	Agent Files
}

// Locate reads the running kubelet's command line. No kubelet running is
// ErrNotRunning, one without --config-dir a *NoConfigDirError; a file the
// agent does not see where it looks says which host directory to mount.
func (l Locator) Locate() (Located, error) {
	pid, err := l.Pid()
	if err != nil {
		return Located{}, fmt.Errorf("find the kubelet: %w", err)
	}
	if pid == 0 {
		return Located{}, ErrNotRunning
	}
	fs, err := procfs.NewFS(l.proc())
	if err != nil {
		return Located{}, err
	}
	p, err := fs.Proc(pid)
	if err != nil {
		return Located{}, fmt.Errorf("%w (pid %d is gone)", ErrNotRunning, pid)
	}
	argv, err := p.CmdLine()
	if err != nil {
		return Located{}, fmt.Errorf("read the kubelet's command line: %w", err)
	}
	if len(argv) == 0 {
		// A process on its way out has no command line left.
		return Located{}, fmt.Errorf("%w (pid %d is exiting)", ErrNotRunning, pid)
	}
	host, err := FromCommandLine(argv, p.Cwd)
	if err != nil {
		return Located{}, fmt.Errorf("%w: give the agent the paths (--target-dir, --kubelet-config)", err)
	}
	if host.ConfigDir == "" {
		return Located{}, &NoConfigDirError{Suggested: l.SuggestedConfigDir}
	}
	loc := Located{Host: host, Agent: Files{Config: l.agentPath(host.Config), ConfigDir: l.agentPath(host.ConfigDir)}}
	if l.Config != "" {
		loc.Agent.Config = l.Config
	} else if loc.Agent.Config != "" {
		if err := l.visible(host.Config, loc.Agent.Config, false); err != nil {
			return Located{}, err
		}
	}
	if err := l.visible(host.ConfigDir, loc.Agent.ConfigDir, true); err != nil {
		return Located{}, err
	}
	return loc, nil
}

// visible checks that the agent sees the kubelet's host file (a directory
// when dir) where it looks for it: else it is not mounted there.
func (l Locator) visible(host, agent string, dir bool) error {
	fi, err := os.Stat(agent)
	switch {
	case err != nil:
	case fi.IsDir() != dir:
		err = fmt.Errorf("not a %s", map[bool]string{false: "file", true: "directory"}[dir])
	case !dir:
		return nil
	default:
		// The drop-in directory is written: a read-only mount of a
		// directory above it (/etc/kubernetes) is not enough.
		if err = unix.Access(agent, unix.W_OK); err == nil {
			return nil
		}
		err = fmt.Errorf("not writable: %w", err)
	}
	flag, mount, mode := "--config", filepath.Dir(host), "read-only"
	if dir {
		flag, mount, mode = "--config-dir", host, "read-write"
	}
	return fmt.Errorf("the kubelet's %s %s is not mounted into the agent at %s (%v): mount the host's %s at %s %s",
		flag, host, agent, err, mount, l.agentPath(mount), mode)
}

func (l Locator) agentPath(host string) string {
	if host == "" {
		return ""
	}
	return filepath.Join(l.root(), host)
}

func (l Locator) root() string {
	if l.HostRoot == "" {
		return "/"
	}
	return l.HostRoot
}

func (l Locator) proc() string {
	if l.Proc == "" {
		return "/proc"
	}
	return l.Proc
}
