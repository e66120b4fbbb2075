package consumer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
)

// process is one process of the host, by its /proc/<pid>/stat.
type process struct{ procfs.ProcStat }

// String is its pid and start (in clock ticks after the host's boot): one
// process, never a later one that reuses the pid.
func (p process) String() string { return fmt.Sprintf("%d@%d", p.PID, p.Starttime) }

// host is the host's /proc as Signal reads it.
type host struct {
	fs procfs.FS
	// roots is, per hierarchy, how /proc/<pid>/cgroup shows the root cgroup
	// to this agent: "/" in the host's cgroup namespace, "/../.." in a
	// pod's, whose own cgroup two levels down is its root.
	roots map[string]string
}

func (s Signal) host() (*host, error) {
	pfs, err := procfs.NewFS(s.proc())
	if err != nil {
		return nil, err
	}
	return &host{fs: pfs, roots: cgroupRoots(pfs)}, nil
}

// cgroupRoots reads the root cgroup's path from kthreadd (pid 2), which
// lives there: an agent in its own cgroup namespace sees every path outside
// it relative to its own cgroup. Without kthreadd (no host pid namespace)
// the paths are taken as the host's.
func cgroupRoots(pfs procfs.FS) map[string]string {
	roots := map[string]string{}
	p, err := pfs.Proc(2)
	if err != nil {
		return roots
	}
	if st, err := p.Stat(); err != nil || st.Comm != "kthreadd" || st.PPID != 0 {
		return roots
	}
	cgs, err := p.Cgroups()
	if err != nil {
		return roots
	}
	for _, c := range cgs {
		roots[hierarchy(c)] = c.Path
	}
	return roots
}

func hierarchy(c procfs.Cgroup) string {
	return strconv.Itoa(c.HierarchyID) + ":" + strings.Join(c.Controllers, ",")
}

// inCgroup reports whether a process with cgroups cgs is in want, an
// absolute path, on any hierarchy. In a cgroup namespace, want shows as the
// root's path followed by want, where the namespace's own cgroup shares no
// ancestor with want but the root (a pod's under kubepods does not with
// system.slice).
func (h *host) inCgroup(cgs []procfs.Cgroup, want string) bool {
	for _, c := range cgs {
		root := strings.TrimSuffix(h.roots[hierarchy(c)], "/")
		if c.Path == root+want {
			return true
		}
	}
	return false
}

// find returns the consumer's running process; ok is false when none runs.
func (s Signal) find() (p process, ok bool, err error) {
	h, err := s.host()
	if err != nil {
		return process{}, false, err
	}
	if s.PidFile != "" {
		pid, err := s.pidFromFile()
		if err != nil || pid == 0 {
			return process{}, false, err
		}
		p, ok := s.identify(h, pid)
		return p, ok, nil
	}
	procs, err := h.fs.AllProcs()
	if err != nil {
		return process{}, false, err
	}
	var found []process
	pids := map[int]bool{}
	for _, pr := range procs {
		if p, ok := s.is(h, pr); ok {
			found = append(found, p)
			pids[p.PID] = true
		}
	}
	// A child the consumer forked is the consumer's copy until it executes
	// its own program (a mount helper): the consumer is its parent.
	found = slices.DeleteFunc(found, func(c process) bool { return pids[c.PPID] })
	switch len(found) {
	case 0:
		return process{}, false, nil
	case 1:
		return found[0], true, nil
	}
	return process{}, false, fmt.Errorf("more than one process in cgroup %s runs %s (pids %d and %d)", s.Cgroup, s.ExePath, found[0].PID, found[1].PID)
}

func (s Signal) pidFromFile() (int, error) {
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
	return pid, nil
}

// identify reads process pid and says whether it is the consumer: in its
// cgroup and running its executable (each where set); a process that is
// gone is not.
func (s Signal) identify(h *host, pid int) (process, bool) {
	pr, err := h.fs.Proc(pid)
	if err != nil {
		return process{}, false
	}
	return s.is(h, pr)
}

// is says whether pr is the consumer (see identify).
func (s Signal) is(h *host, pr procfs.Proc) (process, bool) {
	// Cheapest first: the kernel's name of its program rules out nearly
	// every process of the host, the cgroup nearly every other.
	if s.ExePath != "" {
		if comm, err := pr.Comm(); err != nil || comm != s.comm() {
			return process{}, false
		}
	}
	if s.Cgroup != "" {
		cgs, err := pr.Cgroups()
		if err != nil || !h.inCgroup(cgs, s.Cgroup) {
			return process{}, false
		}
	}
	if s.ExePath != "" && !s.runsExe(pr) {
		return process{}, false
	}
	st, err := pr.Stat()
	if err != nil {
		return process{}, false
	}
	return process{st}, true
}

// comm is the kernel's name of a process running ExePath: its file's name,
// cut to 15 bytes.
func (s Signal) comm() string {
	name := filepath.Base(s.ExePath)
	return name[:min(len(name), 15)]
}

// runsExe reports whether process pr runs ExePath. Its /proc/<pid>/exe
// tells where the agent may read it. The kernel refuses it for a process
// with capabilities the agent lacks (the kubelet's), and then the name the
// process was started by stands in (systemd starts it by its path): inside
// the consumer's cgroup, which only the host's root puts processes in, it
// and the kernel's name of its program tell the consumer from the helpers
// it runs there.
func (s Signal) runsExe(pr procfs.Proc) bool {
	exe, err := os.Readlink(filepath.Join(s.proc(), strconv.Itoa(pr.PID), "exe"))
	if err == nil {
		// A package upgrade replaces the file under a running process.
		return strings.TrimSuffix(exe, " (deleted)") == s.ExePath
	}
	if !errors.Is(err, fs.ErrPermission) {
		return false
	}
	args, err := pr.CmdLine()
	return err == nil && len(args) > 0 && args[0] == s.ExePath
}

// Pid is the consumer's running process, found as a restart finds it
// (its cgroup and executable, or its pid file); 0 when none runs. The
// agent reads where the kubelet keeps its files from its command line.
func (s Signal) Pid() (int, error) {
	p, ok, err := s.find()
	if err != nil || !ok {
		return 0, err
	}
	return p.PID, nil
}
