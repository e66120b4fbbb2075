package realnode_test

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/realnode"
)

// checkAgentsPrivileges looks at the agents' processes from the host, as
// the kernel sees them rather than as their manifests say: statusd runs as
// 65532 with no capabilities, in a PID namespace of its own; checkpointd
// in the host's, where it finds the kubelet. checkpointd's socket, in the
// host directory both Pods mount, is open to statusd's group alone.
func checkAgentsPrivileges(t *testing.T) {
	t.Helper()
	hostPIDs := hostPIDNamespace(t)
	var st, ck processView
	if err := proc.WaitFor(time.Minute, func() (bool, error) {
		// Each read again until both processes answer in one pass: one
		// may be restarting.
		var err error
		if st, err = viewProcess(statusdProcess()); err != nil {
			return false, fmt.Errorf("statusd: %w", err)
		}
		if ck, err = viewProcess(agentProcess()); err != nil {
			return false, fmt.Errorf("checkpointd: %w", err)
		}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("from the host: statusd pid %d uid %v gid %v CapEff %016x pid namespace %s; checkpointd pid %d uid %v pid namespace %s; the host's %s",
		st.pid, st.uid, st.gid, st.capEff, st.pidNS, ck.pid, ck.uid, ck.pidNS, hostPIDs)
	if nobody := [4]uint64{65532, 65532, 65532, 65532}; st.uid != nobody || st.gid != nobody {
		t.Errorf("statusd (pid %d) runs as uid %v gid %v, want 65532 for each", st.pid, st.uid, st.gid)
	}
	if st.capEff != 0 {
		t.Errorf("statusd (pid %d) has effective capabilities %016x, want none", st.pid, st.capEff)
	}
	if st.pidNS == hostPIDs {
		t.Errorf("statusd (pid %d) is in the host's PID namespace %s", st.pid, hostPIDs)
	}
	if ck.pidNS != hostPIDs {
		t.Errorf("checkpointd (pid %d) is in PID namespace %s, not the host's %s: it cannot find the kubelet", ck.pid, ck.pidNS, hostPIDs)
	}

	socket := filepath.Join(realnode.Root, "run", "checkpointd.sock")
	fi, err := os.Lstat(socket)
	if err != nil {
		t.Fatalf("checkpointd's socket on the host: %v", err)
	}
	sys := fi.Sys().(*syscall.Stat_t)
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 || sys.Uid != 0 || sys.Gid != 65532 {
		t.Errorf("checkpointd's socket %s: %v owned by %d:%d, want a socket, 0660, root's and group 65532's", socket, fi.Mode(), sys.Uid, sys.Gid)
	}
}

// hostPIDNamespace is the host's PID namespace: init's, or where this
// machine refuses init's link (as its sandbox does), this test's own, which
// sees init as pid 1 and so is in init's. The kubelet, which the harness
// starts on the host, must be in it too.
func hostPIDNamespace(t *testing.T) string {
	t.Helper()
	ns, err := os.Readlink("/proc/1/ns/pid")
	if err != nil {
		t.Logf("/proc/1/ns/pid: %v; the host's PID namespace is this test's", err)
		if ns, err = os.Readlink("/proc/self/ns/pid"); err != nil {
			t.Fatal(err)
		}
	}
	kubelet, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", node.Kubelet.Pid()))
	if err != nil || kubelet != ns {
		t.Fatalf("the kubelet is in PID namespace %q (%v), not the host's %s", kubelet, err, ns)
	}
	return ns
}

// processView is what /proc says of a process.
type processView struct {
	pid      int
	uid, gid [4]uint64 // real, effective, saved, filesystem
	capEff   uint64
	pidNS    string
}

func viewProcess(pid int) (processView, error) {
	v := processView{pid: pid}
	if pid == 0 {
		return v, fmt.Errorf("no such process")
	}
	p, err := procfs.NewProc(pid)
	if err != nil {
		return v, err
	}
	status, err := p.NewStatus()
	if err != nil {
		return v, err
	}
	v.uid, v.gid, v.capEff = status.UIDs, status.GIDs, status.CapEff
	v.pidNS, err = os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	return v, err
}

// statusdProcess is the pid of a running statusd of the install (its
// arguments name checkpointd's socket), 0 for none.
func statusdProcess() int { return installProcess("--checkpointd=unix://") }
