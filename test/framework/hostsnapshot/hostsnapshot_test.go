package hostsnapshot

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"
)

// Changes made on this machine are of names no one else uses, and undone
// by the test: a tmpfs in its temporary directory, a bridge (it carries
// no traffic), an iptables chain, a cgroup, a setting of that link, a
// directory in /var/lib, a process.
func TestDiffSeesEachKindOfChange(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changes mounts, links, iptables and cgroups: needs root")
	}
	dummy := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "nchsnap0"}}
	if err := netlink.LinkAdd(dummy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netlink.LinkDel(dummy) })
	mark := t.TempDir()
	scope := Scope{Marks: []string{mark}}
	before, err := Take(scope)
	if err != nil {
		t.Fatal(err)
	}

	mnt := filepath.Join(mark, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(mnt, syscall.MNT_DETACH) })
	link := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "nchsnap1"}}
	if err := netlink.LinkAdd(link); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netlink.LinkDel(link) })
	if out, err := exec.Command("iptables", "-w", "-N", "NCHSNAP-TEST").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("iptables", "-w", "-X", "NCHSNAP-TEST").Run() })
	cg := "/sys/fs/cgroup/pids/nchsnap-test"
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Rmdir(cg) })
	forwarding := "/proc/sys/net/ipv4/conf/nchsnap0/forwarding"
	was, err := os.ReadFile(forwarding)
	if err != nil {
		t.Fatal(err)
	}
	set := "1"
	if strings.TrimSpace(string(was)) == "1" {
		set = "0"
	}
	if err := os.WriteFile(forwarding, []byte(set), 0o644); err != nil {
		t.Fatal(err)
	}
	entry := "/var/lib/nchsnap-test"
	if err := os.Mkdir(entry, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(entry) })
	sleeper := exec.Command("/bin/sh", "-c", "sleep 600", mark)
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })

	after, err := Take(scope)
	if err != nil {
		t.Fatal(err)
	}
	diff := before.Diff(after)
	for _, want := range []string{
		"mount added: " + mnt + " (tmpfs tmpfs)",
		"link added: nchsnap1 (bridge)",
		"iptables added: iptables-save filter: :NCHSNAP-TEST -",
		"cgroup added: " + cg,
		"path added: " + entry,
		"sysctl net.ipv4.conf.nchsnap0.forwarding = " + set + ", was " + strings.TrimSpace(string(was)),
	} {
		if !slices.Contains(diff, want) {
			t.Errorf("diff lacks %q", want)
		}
	}
	if !slices.ContainsFunc(diff, func(l string) bool {
		return strings.HasPrefix(l, "process still runs: ") && strings.Contains(l, "sleep 600")
	}) {
		t.Error("diff lacks the sleeping process")
	}
	for _, l := range diff {
		if strings.Contains(l, "nchsnap1") && l != "link added: nchsnap1 (bridge)" {
			t.Errorf("the new link's own settings are listed apart: %q", l)
		}
	}
	if t.Failed() {
		t.Logf("diff:\n  %s", strings.Join(diff, "\n  "))
	}
}

// Two snapshots with nothing done in between are the same: what moves by
// itself (counters, other users' processes and the launcher's cgroups) is
// left out.
func TestNoChangeNoDiff(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("reads iptables: needs root")
	}
	scope := Scope{Marks: []string{t.TempDir()}, Roots: []int{os.Getpid()}}
	before, err := Take(scope)
	if err != nil {
		t.Fatal(err)
	}
	// Commands in between, as a run has.
	if out, err := exec.Command("/bin/sh", "-c", "true").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	after, err := Take(scope)
	if err != nil {
		t.Fatal(err)
	}
	if d := before.Diff(after); len(d) > 0 {
		t.Errorf("nothing changed, yet:\n  %s", strings.Join(d, "\n  "))
	}
}

// A socket this test listens on is listed with this process as its holder,
// and its port is in the test's tree.
func TestListenersFindsTheHolder(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := uint64(l.Addr().(*net.TCPAddr).Port)
	tree, err := Tree(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	ls, err := Listeners()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range ls {
		if s.Port == port && slices.ContainsFunc(s.PIDs, func(p int) bool { return tree[p] }) {
			found = true
		}
	}
	if !found {
		t.Errorf("port %d held by this process not listed: %v", port, ls)
	}
	l.Close()
	if ls, err = Listeners(); err != nil {
		t.Fatal(err)
	}
	for _, s := range ls {
		if s.Port == port {
			t.Errorf("port %d listed after it closed: %+v", port, s)
		}
	}
}

// The launcher's directory is walked into, so that this process's own
// cgroup is listed (a process of it is no new cgroup's); the other
// commands' cgroups beside it are not.
func TestTheLaunchersOwnCgroupIsListed(t *testing.T) {
	l := launcher{dir: "/sys/fs/cgroup/memory/process_api", own: "/sys/fs/cgroup/memory/process_api/ecb1"}
	for dir, skipped := range map[string]bool{
		"/sys/fs/cgroup/memory":                        false,
		"/sys/fs/cgroup/memory/process_api":            false,
		"/sys/fs/cgroup/memory/process_api/ecb1":       false,
		"/sys/fs/cgroup/memory/process_api/ecb1/child": false,
		"/sys/fs/cgroup/memory/process_api/other":      true,
		"/sys/fs/cgroup/memory/process_api/other/x":    true,
		"/sys/fs/cgroup/memory/kubepods":               false,
	} {
		if got := l.skips(dir); got != skipped {
			t.Errorf("skips(%s) = %v, want %v", dir, got, skipped)
		}
	}
}

// A table that only accepts (its built-in chains, no rule, as the
// nf_tables backend makes one when a command first names it) counts as
// none; a rule, a user chain or a policy other than ACCEPT makes it count,
// and a table's lines are prefixed with the saver and the table.
func TestSavedRulesLeaveOutTablesThatOnlyAccept(t *testing.T) {
	out := []byte(`# Generated by ip6tables-save v1.8.9 (nf_tables) on Sat Nov 28 14:53:00 2026
*mangle
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [3:180]
:OUTPUT ACCEPT [0:0]
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:KUBE-MARK-MASQ - [0:0]
COMMIT
*raw
:PREROUTING ACCEPT [0:0]
-A PREROUTING -j ACCEPT
COMMIT
`)
	got := savedRules("ip6tables-save", out)
	want := []string{
		"ip6tables-save filter: :INPUT ACCEPT", "ip6tables-save filter: :FORWARD DROP", "ip6tables-save filter: :OUTPUT ACCEPT",
		"ip6tables-save nat: :PREROUTING ACCEPT", "ip6tables-save nat: :KUBE-MARK-MASQ -",
		"ip6tables-save raw: :PREROUTING ACCEPT", "ip6tables-save raw: -A PREROUTING -j ACCEPT",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("saved rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
