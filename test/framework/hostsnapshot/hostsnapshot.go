// Package hostsnapshot records what a test run could change on this machine
// — mounts, processes, iptables rules, network links, sysctls and cgroups —
// straight from the kernel, so that a test compares the machine before and
// after a run without trusting the run's own record of its changes.
//
// It knows nothing of what a run means to change: it lists everything of
// each kind, except processes, where other users of the machine start and
// end their own all the time; a Scope says which processes are the run's.
package hostsnapshot

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/moby/sys/mountinfo"
	"github.com/prometheus/procfs"
	"github.com/vishvananda/netlink"
)

// Scope says which processes a run may have started.
type Scope struct {
	// Marks are paths (the run's binary directory, its state directory):
	// a process whose executable or arguments contain one is the run's.
	Marks []string
	// Roots are processes whose descendants are the run's (the test
	// itself, a 'make' it started), as long as they are their parent's.
	Roots []int
}

// Snapshot is the machine at one moment.
type Snapshot struct {
	Mounts    []string           // "mountpoint (fstype source)", one per mount
	Processes map[string]Process // by "pid/starttime"
	IPTables  []string           // "command table: rule", counters stripped
	Links     []string           // "name (type)"
	Sysctls   map[string]string  // writable /proc/sys entries
	Cgroups   []string           // directories of every cgroup hierarchy
	Entries   []string           // what SystemDirs hold
	// Volatile are the sysctls that changed between two readings within
	// this snapshot: they move by themselves.
	Volatile map[string]bool
}

// Take snapshots the machine. It reads the sysctls twice, before and after
// the rest, and marks the entries that differ as volatile.
func Take(scope Scope) (*Snapshot, error) {
	first, err := sysctls()
	if err != nil {
		return nil, err
	}
	s := &Snapshot{Volatile: map[string]bool{}}
	if s.Mounts, err = mounts(); err != nil {
		return nil, err
	}
	if s.IPTables, err = iptables(); err != nil {
		return nil, err
	}
	if s.Links, err = links(); err != nil {
		return nil, err
	}
	var h hierarchies
	if s.Cgroups, h, err = cgroups(); err != nil {
		return nil, err
	}
	if s.Entries, err = entries(); err != nil {
		return nil, err
	}
	// Last: the commands above have ended, and any process of the scope
	// still alive is one the run left.
	if s.Processes, err = processes(scope, h); err != nil {
		return nil, err
	}
	if s.Sysctls, err = sysctls(); err != nil {
		return nil, err
	}
	for k, v := range s.Sysctls {
		if first[k] != v {
			s.Volatile[k] = true
		}
	}
	return s, nil
}

// Diff lists every difference from s to after, one readable line each,
// sorted; empty when the machine is as it was.
func (s *Snapshot) Diff(after *Snapshot) []string {
	var d []string
	d = append(d, diffLists("mount", s.Mounts, after.Mounts)...)
	d = append(d, diffLists("iptables", s.IPTables, after.IPTables)...)
	d = append(d, diffLists("link", s.Links, after.Links)...)
	d = append(d, diffLists("cgroup", s.Cgroups, after.Cgroups)...)
	d = append(d, diffLists("path", s.Entries, after.Entries)...)
	cgroupsBefore := map[string]bool{}
	for _, c := range s.Cgroups {
		cgroupsBefore[c] = true
	}
	for k, p := range after.Processes {
		if _, ok := s.Processes[k]; ok {
			continue
		}
		if p.InScope {
			d = append(d, "process still runs: "+p.Line)
			continue
		}
		for _, c := range p.Cgroups {
			if !cgroupsBefore[c] {
				d = append(d, "process still runs in cgroup "+c+": "+p.Line)
				break
			}
		}
	}
	for k, p := range s.Processes {
		if _, ok := after.Processes[k]; !ok && p.InScope {
			d = append(d, "process gone (it ran before): "+p.Line)
		}
	}
	// A link's own settings come and go with it: the link's line says it.
	ofLinks := map[string]bool{}
	for _, l := range slices.Concat(s.Links, after.Links) {
		ofLinks[strings.Fields(l)[0]] = true
	}
	for _, l := range s.Links {
		if slices.Contains(after.Links, l) {
			delete(ofLinks, strings.Fields(l)[0])
		}
	}
	ofLink := func(key string) bool {
		for _, part := range strings.Split(key, ".") {
			if ofLinks[part] {
				return true
			}
		}
		return false
	}
	for k, v := range after.Sysctls {
		if s.Volatile[k] || after.Volatile[k] {
			continue
		}
		was, ok := s.Sysctls[k]
		switch {
		case !ok && ofLink(k):
		case !ok:
			d = append(d, fmt.Sprintf("sysctl %s = %s added", k, v))
		case was != v:
			d = append(d, fmt.Sprintf("sysctl %s = %s, was %s", k, v, was))
		}
	}
	for k, v := range s.Sysctls {
		if _, ok := after.Sysctls[k]; !ok && !s.Volatile[k] && !ofLink(k) {
			d = append(d, fmt.Sprintf("sysctl %s (= %s) gone", k, v))
		}
	}
	sort.Strings(d)
	return d
}

// diffLists compares two lists as multisets: a mount stacked twice on one
// point, or a rule appended twice, is a difference.
func diffLists(kind string, before, after []string) []string {
	count := map[string]int{}
	for _, l := range before {
		count[l]--
	}
	for _, l := range after {
		count[l]++
	}
	var d []string
	for l, n := range count {
		for ; n > 0; n-- {
			d = append(d, kind+" added: "+l)
		}
		for ; n < 0; n++ {
			d = append(d, kind+" removed: "+l)
		}
	}
	return d
}

// SystemDirs are where programs keep state on a host whatever their flags
// say (containerd's /run/containerd, the kubelet's /var/lib/kubelet, the CNI
// plugins' /etc/cni and /opt/cni...): what a run adds or removes in them is
// a change to the host. /tmp is not one: every user of the machine writes
// there.
var SystemDirs = []string{"/etc", "/opt", "/run", "/var/lib", "/var/log", "/usr/libexec", "/usr/local/bin", "/usr/local/lib"}

func entries() ([]string, error) {
	var paths []string
	for _, dir := range SystemDirs {
		es, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		for _, e := range es {
			paths = append(paths, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(paths)
	return paths, nil
}

func mounts() ([]string, error) {
	infos, err := mountinfo.GetMounts(nil)
	if err != nil {
		return nil, err
	}
	var ms []string
	for _, m := range infos {
		ms = append(ms, fmt.Sprintf("%s (%s %s)", m.Mountpoint, m.FSType, m.Source))
	}
	sort.Strings(ms)
	return ms, nil
}

// iptablesCommands are the savers of the backend the iptables command uses,
// the one the kubelet and the CNI plugins use too.
var iptablesCommands = []string{"iptables-save", "ip6tables-save"}

// iptables lists every rule and chain, table by table, without packet and
// byte counters (they move whenever traffic flows) or comments (they carry
// the time).
func iptables() ([]string, error) {
	var rules []string
	for _, c := range iptablesCommands {
		path, err := exec.LookPath(c)
		if err != nil {
			continue
		}
		out, err := exec.Command(path).Output()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c, err)
		}
		rules = append(rules, savedRules(c, out)...)
	}
	sort.Strings(rules)
	return rules, nil
}

// savedRules are the lines of one saver's output, each prefixed with the
// saver and its table, pristine tables left out.
func savedRules(c string, out []byte) []string {
	var rules []string
	table, lines := "", []string(nil)
	endTable := func() {
		if !pristine(lines) {
			for _, l := range lines {
				rules = append(rules, fmt.Sprintf("%s %s: %s", c, table, l))
			}
		}
		lines = nil
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case line == "COMMIT":
			endTable()
		case strings.HasPrefix(line, "*"):
			endTable()
			table = line[1:]
		default:
			if strings.HasPrefix(line, ":") {
				// ":CHAIN POLICY [packets:bytes]"
				if i := strings.LastIndex(line, " ["); i > 0 {
					line = line[:i]
				}
			}
			lines = append(lines, line)
		}
	}
	endTable()
	return rules
}

// pristine says whether a table's lines are only its built-in chains,
// accepting everything: how a table first appears when an iptables command
// names it, a listing included, under the nf_tables backend, which never
// removes one. It filters nothing, so it counts as no table (as the
// node's own record, test/realnode/hoststate, counts it).
func pristine(lines []string) bool {
	for _, l := range lines {
		chain, policy, ok := strings.Cut(strings.TrimPrefix(l, ":"), " ")
		if !strings.HasPrefix(l, ":") || !ok || policy != "ACCEPT" || !builtinChains[chain] {
			return false
		}
	}
	return true
}

var builtinChains = map[string]bool{"PREROUTING": true, "INPUT": true, "FORWARD": true, "OUTPUT": true, "POSTROUTING": true}

func links() ([]string, error) {
	ls, err := netlink.LinkList()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, l := range ls {
		names = append(names, fmt.Sprintf("%s (%s)", l.Attrs().Name, l.Type()))
	}
	sort.Strings(names)
	return names, nil
}

// sysctls reads every entry of /proc/sys that can be written, as 'sysctl -a'
// lists them: an entry no one can write is a counter of the kernel's (file
// handles, entropy, conntrack entries), which no run sets.
func sysctls() (map[string]string, error) {
	vals := map[string]string{}
	err := filepath.WalkDir("/proc/sys", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil || info.Mode().Perm()&0o222 == 0 || info.Mode().Perm()&0o444 == 0 {
			return nil
		}
		buf, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		key := strings.ReplaceAll(strings.TrimPrefix(path, "/proc/sys/"), "/", ".")
		vals[key] = strings.Join(strings.Fields(string(buf)), " ")
		return nil
	})
	return vals, err
}

// cgroups lists the directories of every mounted cgroup hierarchy, but for
// the launcher's: when this process runs in a cgroup below a hierarchy's
// root, the directory holding it is whoever started the test (a sandbox
// makes one cgroup per command there, as other users of the machine run
// theirs); of that directory only this process's own subtree counts.
func cgroups() (dirs []string, h hierarchies, err error) {
	infos, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return nil, h, err
	}
	own, err := procfs.NewDefaultFS()
	if err != nil {
		return nil, h, err
	}
	self, err := own.Self()
	if err != nil {
		return nil, h, err
	}
	mine, err := self.Cgroups()
	if err != nil {
		return nil, h, err
	}
	var launchers []launcher
	for _, m := range infos {
		for _, c := range mine {
			if c.Path == "/" || !sameHierarchy(m, c) {
				continue
			}
			dir := filepath.Join(m.Mountpoint, strings.TrimPrefix(c.Path, m.Root))
			launchers = append(launchers, launcher{dir: filepath.Dir(dir), own: dir})
		}
	}
	skip := func(dir string) bool {
		for _, l := range launchers {
			if l.skips(dir) {
				return true
			}
		}
		return false
	}
	for _, m := range infos {
		_ = filepath.WalkDir(m.Mountpoint, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if skip(path) {
				return filepath.SkipDir
			}
			dirs = append(dirs, path)
			return nil
		})
	}
	sort.Strings(dirs)
	return dirs, hierarchies{mounts: infos, skip: skip}, nil
}

// hierarchies are the cgroup hierarchies mounted here and which of their
// directories are the launcher's, read once for a snapshot.
type hierarchies struct {
	mounts []*mountinfo.Info
	skip   func(string) bool
}

// launcher is the cgroup directory a sandbox makes one cgroup per command
// in (dir), and the one this process runs in (own).
type launcher struct{ dir, own string }

// skips says whether dir is another command's cgroup, or below one: dir
// itself is listed, and walked into, so that the own one is too.
func (l launcher) skips(dir string) bool {
	return under(dir, l.dir) && dir != l.dir && !under(dir, l.own)
}

// sameHierarchy says whether the cgroup c of /proc/<pid>/cgroup is on the
// hierarchy mounted at m.
func sameHierarchy(m *mountinfo.Info, c procfs.Cgroup) bool {
	if m.FSType == "cgroup2" {
		return c.HierarchyID == 0
	}
	opts := strings.Split(m.VFSOptions, ",")
	if len(c.Controllers) == 0 {
		return false
	}
	for _, ctl := range c.Controllers {
		if !slices.Contains(opts, ctl) {
			return false
		}
	}
	return true
}

// cgroupDirs turns a process's cgroups into directories of the hierarchies
// mounted here, leaving out the hierarchies' roots and the launcher's.
func (h hierarchies) cgroupDirs(cgs []procfs.Cgroup) []string {
	var dirs []string
	for _, c := range cgs {
		if c.Path == "/" {
			continue
		}
		for _, m := range h.mounts {
			if !sameHierarchy(m, c) {
				continue
			}
			dir := filepath.Join(m.Mountpoint, strings.TrimPrefix(c.Path, m.Root))
			if !h.skip(dir) {
				dirs = append(dirs, dir)
			}
		}
	}
	return dirs
}

func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// Process is one process a run may have started.
type Process struct {
	Line string // "pid executable [arguments]"
	// InScope: its executable or arguments name a mark, or it descends
	// from a root.
	InScope bool
	// Cgroups are its cgroup directories below the hierarchies' roots (but
	// the launcher's): one absent before the run is the run's, and so is
	// every process in it (a container's).
	Cgroups []string
}

// processes lists the processes of the scope, and those in a cgroup other
// than a hierarchy's root or the launcher's. This process and its ancestors
// are never listed: they run the test.
func processes(scope Scope, h hierarchies) (map[string]Process, error) {
	pfs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil, err
	}
	all, err := pfs.AllProcs()
	if err != nil {
		return nil, err
	}
	type info struct {
		ppid  int
		start uint64
		proc  Process
	}
	byPid := map[int]*info{}
	for _, p := range all {
		st, err := p.Stat()
		if err != nil || st.State == "Z" {
			continue // ended, or a zombie: ended, its parent yet to read its status
		}
		exe, _ := p.Executable()
		args, _ := p.CmdLine()
		cmdline := strings.Join(args, " ")
		if len(cmdline) > 300 {
			cmdline = cmdline[:300] + "..."
		}
		i := &info{ppid: st.PPID, start: st.Starttime, proc: Process{Line: fmt.Sprintf("%d %s [%s]", p.PID, exe, cmdline)}}
		for _, m := range scope.Marks {
			if strings.Contains(exe, m) || strings.Contains(cmdline, m) {
				i.proc.InScope = true
			}
		}
		if cgs, err := p.Cgroups(); err == nil {
			i.proc.Cgroups = h.cgroupDirs(cgs)
		}
		byPid[p.PID] = i
	}
	ancestors := map[int]bool{}
	for pid := os.Getpid(); pid > 1 && !ancestors[pid]; {
		ancestors[pid] = true
		i, ok := byPid[pid]
		if !ok {
			break
		}
		pid = i.ppid
	}
	descends := func(pid int) bool {
		seen := map[int]bool{}
		for pid > 1 && !seen[pid] {
			seen[pid] = true
			if slices.Contains(scope.Roots, pid) {
				return true
			}
			i, ok := byPid[pid]
			if !ok {
				return false
			}
			pid = i.ppid
		}
		return false
	}
	procs := map[string]Process{}
	for pid, i := range byPid {
		if ancestors[pid] {
			continue
		}
		i.proc.InScope = i.proc.InScope || descends(i.ppid)
		if i.proc.InScope || len(i.proc.Cgroups) > 0 {
			procs[fmt.Sprintf("%d/%d", pid, i.start)] = i.proc
		}
	}
	return procs, nil
}
