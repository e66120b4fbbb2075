// Package readonlymount makes a directory a real read-only filesystem for a
// test: root ignores permission bits, so only a read-only mount stops it.
package readonlymount

import (
	"errors"
	"syscall"
	"testing"
)

// Mount bind-mounts dir read-only over itself until the returned undo,
// which the test's cleanup also runs.
func Mount(t testing.TB, dir string) (undo func()) {
	t.Helper()
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		if errors.Is(err, syscall.EPERM) {
			t.Skipf("a read-only bind mount needs CAP_SYS_ADMIN: %v", err)
		}
		t.Fatal(err)
	}
	mounted := true
	undo = func() {
		if mounted {
			mounted = false
			if err := syscall.Unmount(dir, 0); err != nil {
				t.Errorf("unmount %s: %v", dir, err)
			}
		}
	}
	t.Cleanup(undo)
	if err := syscall.Mount("", dir, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	return undo
}
