package powercut

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The launcher's environment: the binary it becomes, and the Disk's
// socket it hands the filter's listener to.
const (
	envExec   = "POWERCUT_EXEC"
	envSocket = "POWERCUT_SOCKET"
)

// syncCalls are the system calls that make data durable. msync is not one
// of them: neither bbolt nor atomicfile writes through a mapping.
var syncCalls = []uint32{unix.SYS_FSYNC, unix.SYS_FDATASYNC, unix.SYS_SYNC_FILE_RANGE, unix.SYS_SYNCFS, unix.SYS_SYNC}

// auditArch is this build's seccomp architecture.
var auditArch = map[string]uint32{"amd64": unix.AUDIT_ARCH_X86_64, "arm64": unix.AUDIT_ARCH_AARCH64}[runtime.GOARCH]

// MaybeExec makes a process the Disk started (Disk.Command) into the
// program it runs, with every sync call reported to the Disk; in any other
// process it returns at once. A test package that launches through a Disk
// calls it first in TestMain, before flags are parsed.
func MaybeExec() {
	target := os.Getenv(envExec)
	if target == "" {
		return
	}
	err := launch(target, os.Getenv(envSocket))
	fmt.Fprintf(os.Stderr, "powercut: %v\n", err)
	os.Exit(127)
}

// launch installs the filter on this thread, hands its listener to the
// Disk and, once the Disk listens, execs target on the same thread: a
// seccomp filter belongs to the thread that installed it, and an exec
// keeps it for the new program and every child of it.
func launch(target, socket string) error {
	runtime.LockOSThread()
	prog, err := filter()
	if err != nil {
		return err
	}
	// Without it only a privileged process may install a filter.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	listener, err := installFilter(prog)
	if err != nil {
		return err
	}
	conn, err := net.Dial("unix", socket)
	if err != nil {
		return fmt.Errorf("dial the disk at %s: %w", socket, err)
	}
	uc := conn.(*net.UnixConn)
	if _, _, err := uc.WriteMsgUnix([]byte{0}, unix.UnixRights(listener), nil); err != nil {
		return fmt.Errorf("hand the listener to the disk: %w", err)
	}
	// The Disk answers once it serves the listener: no sync call may wait
	// on a listener nobody reads.
	if _, err := uc.Read(make([]byte, 1)); err != nil {
		return fmt.Errorf("wait for the disk: %w", err)
	}
	_ = conn.Close()
	_ = unix.Close(listener)
	// The program does not see the launcher's environment.
	_ = os.Unsetenv(envExec)
	_ = os.Unsetenv(envSocket)
	return syscall.Exec(target, append([]string{target}, os.Args[1:]...), os.Environ())
}

// filter is the seccomp program: every sync call of this architecture
// goes to the listener, everything else is allowed.
func filter() ([]bpf.RawInstruction, error) {
	if auditArch == 0 {
		return nil, fmt.Errorf("no seccomp architecture known for %s", runtime.GOARCH)
	}
	n := uint8(len(syncCalls))
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: auditArch, SkipTrue: n + 1},
		bpf.LoadAbsolute{Off: 0, Size: 4}, // seccomp_data.nr
	}
	for i, nr := range syncCalls {
		// Past the remaining comparisons and the allow, to the notify.
		prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr, SkipTrue: n - uint8(i)})
	}
	prog = append(prog, bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW}, bpf.RetConstant{Val: unix.SECCOMP_RET_USER_NOTIF})
	return bpf.Assemble(prog)
}

// seccompFilterFlagWaitKillableRecv keeps a sync call the Disk has
// received from being interrupted (and sent again) by the Go runtime's
// preemption signals; kernels before 5.19 refuse it.
const seccompFilterFlagWaitKillableRecv = 1 << 5

// installFilter loads prog on this thread and returns its listener.
func installFilter(prog []bpf.RawInstruction) (int, error) {
	raw := make([]unix.SockFilter, len(prog))
	for i, ins := range prog {
		raw[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(raw)), Filter: &raw[0]}
	var lastErr error
	for _, flags := range []uintptr{unix.SECCOMP_FILTER_FLAG_NEW_LISTENER | seccompFilterFlagWaitKillableRecv, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER} {
		fd, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
		if errno == 0 {
			return int(fd), nil
		}
		lastErr = errno
	}
	return -1, fmt.Errorf("install the seccomp filter: %w", lastErr)
}
