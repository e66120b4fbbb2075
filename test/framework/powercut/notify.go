package powercut

import (
	"errors"
	"unsafe"

	"golang.org/x/sys/unix"
)

// seccompNotif is the kernel's struct seccomp_notif; x/sys has its ioctls
// but not its layout.
type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Data  struct {
		Nr                 int32
		Arch               uint32
		InstructionPointer uint64
		Args               [6]uint64
	}
}

// seccompNotifResp is struct seccomp_notif_resp.
type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// receive waits up to timeoutMs for the next sync call on listener. It
// returns ok false on a timeout, and errGone once no process is left
// behind the filter.
func receive(listener int, timeoutMs int) (n seccompNotif, ok bool, err error) {
	fds := []unix.PollFd{{Fd: int32(listener), Events: unix.POLLIN}}
	if _, err := unix.Poll(fds, timeoutMs); err != nil {
		if errors.Is(err, unix.EINTR) {
			return n, false, nil
		}
		return n, false, err
	}
	switch {
	case fds[0].Revents&unix.POLLIN != 0:
	case fds[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0:
		return n, false, errGone
	default:
		return n, false, nil
	}
	if err := ioctl(listener, unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(&n)); err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINTR) {
			// The caller died (or was interrupted) before we read it.
			return n, false, nil
		}
		return n, false, err
	}
	return n, true, nil
}

// proceed lets the call run as the program made it. A call whose caller
// was killed meanwhile is no error.
func proceed(listener int, id uint64) error {
	resp := seccompNotifResp{ID: id, Flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE}
	if err := ioctl(listener, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&resp)); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}

// stillWaiting says whether the call id is still blocked in the kernel:
// its pid then still names the process that made it.
func stillWaiting(listener int, id uint64) bool {
	return ioctl(listener, unix.SECCOMP_IOCTL_NOTIF_ID_VALID, unsafe.Pointer(&id)) == nil
}

var errGone = errors.New("no process is left behind the filter")

func ioctl(fd int, req uint, arg unsafe.Pointer) error {
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg)); errno != 0 {
		return errno
	}
	return nil
}
