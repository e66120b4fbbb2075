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
	"slices"

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
	err := pathFlags(argv, cwd, map[string]*string{"config": &f.Config, "config-dir": &f.ConfigDir})
	return f, err
}

// DefaultRootDir is the kubelet's --root-dir where it is given none.
const DefaultRootDir = "/var/lib/kubelet"

// RootDirFromCommandLine reads the kubelet's --root-dir as FromCommandLine
// reads its files: DefaultRootDir where it has none.
func RootDirFromCommandLine(argv []string, cwd func() (string, error)) (string, error) {
	var dir string
	if err := pathFlags(argv, cwd, map[string]*string{"root-dir": &dir}); err != nil {
		return "", err
	}
	if dir == "" {
		return DefaultRootDir, nil
	}
	return dir, nil
}

// pathFlags parses the path flags named (without their dashes) off argv,
// cleaned and made absolute; one absent or empty is "".
func pathFlags(argv []string, cwd func() (string, error), paths map[string]*string) error {
	fs := pflag.NewFlagSet("kubelet", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	fs.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	names := make([]string, 0, len(paths))
	for name, path := range paths {
		fs.StringVar(path, name, "", "")
		names = append(names, name)
	}
	var missing *pflag.ValueRequiredError
	if err := fs.Parse(argv[min(1, len(argv)):]); errors.As(err, &missing) {
		return fmt.Errorf("the kubelet's command line ends in --%s with no value", missing.GetSpecifiedName())
	} else if err != nil {
		return fmt.Errorf("read the kubelet's command line: %w", err)
	}
	// In a fixed order: the working directory is asked for once, and the
	// first relative path is the one an error names.
	slices.Sort(names)
	dir := ""
	for _, name := range names {
		path := paths[name]
		if *path == "" || filepath.IsAbs(*path) {
			*path = filepath.Clean(*path)
			if *path == "." {
				*path = ""
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
				return fmt.Errorf("the kubelet's --%s %q is relative and its working directory cannot be read: %w", name, *path, err)
			}
			dir = wd
		}
		*path = filepath.Join(dir, *path)
	}
	return nil
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
	var host Files
	if err := l.readCommandLine(func(argv []string, cwd func() (string, error)) (err error) {
		if host, err = FromCommandLine(argv, cwd); err != nil {
			return fmt.Errorf("%w: give the agent the paths (--target-dir, --kubelet-config)", err)
		}
		return nil
	}); err != nil {
		return Located{}, err
	}
	if host.ConfigDir == "" {
		return Located{}, &NoConfigDirError{Suggested: l.SuggestedConfigDir}
	}
	loc := Located{Host: host, Agent: Files{Config: l.agentPath(host.Config), ConfigDir: l.agentPath(host.ConfigDir)}}
	if l.Config != "" {
		loc.Agent.Config = l.Config
	} else if loc.Agent.Config != "" {
		if err := l.visible("--config", host.Config, loc.Agent.Config, false); err != nil {
			return Located{}, err
		}
	}
	if err := l.visible("--config-dir", host.ConfigDir, loc.Agent.ConfigDir, true); err != nil {
		return Located{}, err
	}
	return loc, nil
}

// RootDir is the kubelet's --root-dir as the agent reads and writes it
// (under HostRoot): a directory the agent sees writable, or an error that
// says what to mount.
func (l Locator) RootDir() (string, error) {
	var host string
	if err := l.readCommandLine(func(argv []string, cwd func() (string, error)) (err error) {
		if host, err = RootDirFromCommandLine(argv, cwd); err != nil {
			return fmt.Errorf("%w: give the agent the path (--kubelet-root-dir)", err)
		}
		return nil
	}); err != nil {
		return "", err
	}
	agent := l.agentPath(host)
	if err := l.visible("--root-dir", host, agent, true); err != nil {
		return "", err
	}
	return agent, nil
}

// readCommandLine hands the running kubelet's command line and a reader of
// its working directory to parse.
func (l Locator) readCommandLine(parse func(argv []string, cwd func() (string, error)) error) error {
	pid, err := l.Pid()
	if err != nil {
		return fmt.Errorf("find the kubelet: %w", err)
	}
	if pid == 0 {
		return ErrNotRunning
	}
	fs, err := procfs.NewFS(l.proc())
	if err != nil {
		return err
	}
	p, err := fs.Proc(pid)
	if err != nil {
		return fmt.Errorf("%w (pid %d is gone)", ErrNotRunning, pid)
	}
	argv, err := p.CmdLine()
	if err != nil {
		return fmt.Errorf("read the kubelet's command line: %w", err)
	}
	if len(argv) == 0 {
		// A process on its way out has no command line left.
		return fmt.Errorf("%w (pid %d is exiting)", ErrNotRunning, pid)
	}
	return parse(argv, p.Cwd)
}

// visible checks that the agent sees the kubelet's host file (a writable
// directory when dir), its flag, where it looks for it: else it is not
// mounted there.
func (l Locator) visible(flag, host, agent string, dir bool) error {
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
	mount, mode := filepath.Dir(host), "read-only"
	if dir {
		mount, mode = host, "read-write"
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
