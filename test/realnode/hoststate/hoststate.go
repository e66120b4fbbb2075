// Package hoststate records what a real node (containerd, the kubelet, the
// CNI bridge) may change on this machine before it starts, and puts every
// such thing back afterwards: processes, mounts, cgroups, iptables rules,
// sysctls, network links and the hard-coded directories. The record is a
// file written before the first change, so a run that was killed midway is
// undone by the next run's start.
package hoststate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
	"github.com/prometheus/procfs"
	"github.com/vishvananda/netlink"
)

// Sysctls are the kernel settings the kubelet and the CNI bridge plugin set.
var Sysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/ip_forward",
}

// FixedPaths are directories containerd, the kubelet and the CNI plugins use
// whatever their flags say, and /run/mount, where util-linux's mount, which
// the kubelet runs for volumes, keeps its table.
var FixedPaths = []string{
	"/run/containerd", "/var/lib/kubelet", "/var/lib/cni", "/var/log/containers", "/var/log/pods",
	"/run/netns", "/etc/cni", "/opt/cni", "/opt/containerd",
	"/usr/libexec/kubernetes", "/run/mount",
}

// Before is what the machine looked like before the node started.
type Before struct {
	// Root holds all of the node's own state; it is removed last.
	Root string
	// Bridge is the CNI bridge the node's pods use.
	Bridge string
	// Address is the containerd socket: shims started for it carry it in their arguments.
	Address string
	// Binaries are the node's own programs: a process running one of them is ours.
	Binaries []string
	// KubeletCgroup is the cgroup directory the node creates for its
	// kubelet (its parent, when the kubelet's is nested): every process in
	// it is the node's, and it is removed with everything below it.
	KubeletCgroup string

	Sysctls    map[string]string
	Existing   map[string]bool             // FixedPaths that existed
	Netns      []string                    // entries of /run/netns
	Cgroups    map[string]bool             // per cgroup hierarchy: whether kubepods existed
	IPTables   map[string]map[string]rules // per iptables-save command, per table
	BridgeHere bool
}

// recordFile is where Before is kept, beside (not inside) the root so that
// removing the root cannot lose it before the undo is complete.
func recordFile(root string) string { return filepath.Clean(root) + ".host-before.json" }

// Take records the machine's state and writes the record, after undoing
// what an earlier run left behind.
func Take(b Before) (*Before, error) {
	if err := UndoLeftovers(b.Root); err != nil {
		return nil, fmt.Errorf("undo an earlier run's changes: %w", err)
	}
	observed := Observe(b)
	buf, err := json.MarshalIndent(observed, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeSynced(recordFile(b.Root), buf); err != nil {
		return nil, err
	}
	return observed, nil
}

// Observe records the machine's state without keeping a record or undoing
// anything: what a test compares the machine with after a run.
func Observe(b Before) *Before {
	b.Sysctls = map[string]string{}
	for _, s := range Sysctls {
		if v, err := os.ReadFile(filepath.Join("/proc/sys", s)); err == nil {
			b.Sysctls[s] = strings.TrimSpace(string(v))
		}
	}
	b.Existing = map[string]bool{}
	for _, p := range FixedPaths {
		if _, err := os.Lstat(p); err == nil {
			b.Existing[p] = true
		}
	}
	b.Netns = netnsEntries()
	b.Cgroups = map[string]bool{}
	for _, h := range cgroupHierarchies() {
		_, err := os.Stat(filepath.Join(h, "kubepods"))
		b.Cgroups[h] = err == nil
	}
	b.IPTables = map[string]map[string]rules{}
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		if tables, ok := saveTables(save); ok {
			b.IPTables[save] = tables
		}
	}
	_, err := netlink.LinkByName(b.Bridge)
	b.BridgeHere = err == nil
	return &b
}

// UndoLeftovers undoes an earlier run whose record is still on disk.
func UndoLeftovers(root string) error {
	buf, err := os.ReadFile(recordFile(root))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var b Before
	if err := json.Unmarshal(buf, &b); err != nil {
		return fmt.Errorf("%s: %w", recordFile(root), err)
	}
	return b.Undo()
}

// Undo stops every process of the node, then reverts each change, and
// removes the record last. It goes on past a failed step and reports all.
func (b *Before) Undo() error {
	var errs []error
	errs = append(errs, b.killProcesses())
	errs = append(errs, b.unmount())
	for _, e := range netnsEntries() {
		if !slices.Contains(b.Netns, e) {
			errs = append(errs, removeIfExists(filepath.Join("/run/netns", e)))
		}
	}
	if !b.BridgeHere {
		if l, err := netlink.LinkByName(b.Bridge); err == nil {
			errs = append(errs, netlink.LinkDel(l))
		}
	}
	for h, existed := range b.Cgroups {
		if !existed {
			errs = append(errs, removeCgroupTree(filepath.Join(h, "kubepods")))
		}
	}
	if b.KubeletCgroup != "" {
		errs = append(errs, removeCgroupTree(b.KubeletCgroup))
	}
	for save, tables := range b.IPTables {
		errs = append(errs, undoIPTables(save, tables))
	}
	for s, v := range b.Sysctls {
		p := filepath.Join("/proc/sys", s)
		if now, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(now)) != v {
			errs = append(errs, os.WriteFile(p, []byte(v), 0o644))
		}
	}
	for _, p := range FixedPaths {
		if !b.Existing[p] {
			errs = append(errs, os.RemoveAll(p))
		}
	}
	errs = append(errs, os.RemoveAll(b.Root))
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return removeIfExists(recordFile(b.Root))
}

// Leftovers lists every way the machine still differs from the record: what
// a test asserts is empty after the node stopped.
func (b *Before) Leftovers() []string {
	var left []string
	for _, p := range b.processes() {
		left = append(left, fmt.Sprintf("process %d (%s) still runs", p.PID, p.exe))
	}
	for _, m := range b.mounts() {
		left = append(left, "mount "+m+" still mounted")
	}
	for _, e := range netnsEntries() {
		if !slices.Contains(b.Netns, e) {
			left = append(left, "network namespace "+e+" left")
		}
	}
	if _, err := netlink.LinkByName(b.Bridge); err == nil && !b.BridgeHere {
		left = append(left, "bridge "+b.Bridge+" left")
	}
	for h, existed := range b.Cgroups {
		if _, err := os.Stat(filepath.Join(h, "kubepods")); err == nil && !existed {
			left = append(left, "cgroup "+filepath.Join(h, "kubepods")+" left")
		}
	}
	if _, err := os.Stat(b.KubeletCgroup); b.KubeletCgroup != "" && err == nil {
		left = append(left, "cgroup "+b.KubeletCgroup+" left")
	}
	for save, tables := range b.IPTables {
		if now, ok := saveTables(save); ok {
			for _, a := range iptablesDiff(tables, now) {
				left = append(left, save+" has "+a)
			}
		}
	}
	for s, v := range b.Sysctls {
		if now, err := os.ReadFile(filepath.Join("/proc/sys", s)); err == nil && strings.TrimSpace(string(now)) != v {
			left = append(left, fmt.Sprintf("sysctl %s = %s, was %s", s, strings.TrimSpace(string(now)), v))
		}
	}
	for _, p := range append(FixedPaths, b.Root, recordFile(b.Root)) {
		if _, err := os.Lstat(p); err == nil && !b.Existing[p] {
			left = append(left, p+" left")
		}
	}
	sort.Strings(left)
	return left
}

type ownProcess struct {
	PID int
	exe string
}

// processes finds the node's processes: its binaries, containerd's shims for
// its socket, and everything inside the kubepods cgroups (the containers)
// and the kubelet's.
func (b *Before) processes() []ownProcess {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil
	}
	all, err := fs.AllProcs()
	if err != nil {
		return nil
	}
	inCgroups := map[int]bool{}
	for h, existed := range b.Cgroups {
		if !existed {
			addCgroupTreePids(inCgroups, filepath.Join(h, "kubepods"))
		}
	}
	if b.KubeletCgroup != "" {
		addCgroupTreePids(inCgroups, b.KubeletCgroup)
	}
	var own []ownProcess
	for _, p := range all {
		if p.PID == os.Getpid() {
			continue
		}
		exe, _ := p.Executable()
		args, _ := p.CmdLine()
		cmdline := strings.Join(args, " ")
		// Other clusters on this machine run the same binaries: only those
		// whose arguments name the node's root are its own.
		mine := inCgroups[p.PID] || (slices.Contains(b.Binaries, exe) && strings.Contains(cmdline, b.Root)) ||
			(strings.HasPrefix(filepath.Base(exe), "containerd-shim") && strings.Contains(cmdline, b.Address))
		if mine {
			own = append(own, ownProcess{PID: p.PID, exe: exe})
		}
	}
	return own
}

// addCgroupTreePids adds to pids the processes in the cgroup dir and below.
func addCgroupTreePids(pids map[int]bool, dir string) {
	_ = filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || info.Name() != "cgroup.procs" {
			return nil
		}
		buf, _ := os.ReadFile(path)
		for _, f := range strings.Fields(string(buf)) {
			var pid int
			if _, err := fmt.Sscan(f, &pid); err == nil {
				pids[pid] = true
			}
		}
		return nil
	})
}

// killProcesses SIGKILLs the node's processes until none is left: killing
// a shim can orphan a container that is then found in its cgroup.
func (b *Before) killProcesses() error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		own := b.processes()
		if len(own) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes survive SIGKILL: %v", own)
		}
		for _, p := range own {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// mounts lists the mount points under the node's root and the fixed paths
// that did not exist before, deepest first.
func (b *Before) mounts() []string {
	infos, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		if under(m.Mountpoint, b.Root) {
			return false, false
		}
		for _, p := range FixedPaths {
			if under(m.Mountpoint, p) && !b.Existing[p] {
				return false, false
			}
		}
		for _, e := range netnsEntries() {
			if !slices.Contains(b.Netns, e) && m.Mountpoint == filepath.Join("/run/netns", e) {
				return false, false
			}
		}
		return true, false
	})
	if err != nil {
		return nil
	}
	var points []string
	for _, m := range infos {
		points = append(points, m.Mountpoint)
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	return points
}

func (b *Before) unmount() error {
	// A bind mount may be stacked several times on one point.
	for range 5 {
		points := b.mounts()
		if len(points) == 0 {
			return nil
		}
		for _, p := range points {
			_ = syscall.Unmount(p, syscall.MNT_DETACH)
		}
	}
	if left := b.mounts(); len(left) > 0 {
		return fmt.Errorf("still mounted: %v", left)
	}
	return nil
}

func cgroupHierarchies() []string {
	infos, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return nil
	}
	var hs []string
	for _, m := range infos {
		hs = append(hs, m.Mountpoint)
	}
	sort.Strings(hs)
	return hs
}

// removeCgroupTree removes a cgroup and its children, leaves first (a cgroup
// directory can only be removed once it is empty of children and tasks).
func removeCgroupTree(dir string) error {
	var dirs []string
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err == nil && info.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	var errs []error
	for _, d := range dirs {
		if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

func netnsEntries() []string {
	entries, _ := os.ReadDir("/run/netns")
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

func removeIfExists(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func writeSynced(path string, buf []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(buf); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
