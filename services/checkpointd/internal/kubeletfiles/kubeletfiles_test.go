package kubeletfiles

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func noCwd() (string, error) { return "", errors.New("cwd asked for") }

func TestFromCommandLineForms(t *testing.T) {
	for _, tc := range []struct {
		name string
		argv []string
		want Files
	}{
		{"flag=value", []string{"/usr/bin/kubelet", "--config=/var/lib/kubelet/config.yaml", "--config-dir=/etc/kubernetes/kubelet.conf.d"},
			Files{"/var/lib/kubelet/config.yaml", "/etc/kubernetes/kubelet.conf.d"}},
		{"flag value", []string{"/usr/bin/kubelet", "--config", "/var/lib/kubelet/config.yaml", "--v", "2", "--config-dir", "/etc/kubernetes/kubelet.conf.d"},
			Files{"/var/lib/kubelet/config.yaml", "/etc/kubernetes/kubelet.conf.d"}},
		{"underscores as the kubelet normalizes them", []string{"kubelet", "--config_dir=/d", "--config", "/c"}, Files{"/c", "/d"}},
		{"the last one wins", []string{"kubelet", "--config-dir=/first", "--config-dir", "/second"}, Files{"", "/second"}},
		{"missing flags", []string{"/usr/bin/kubelet", "--kubeconfig=/etc/kubernetes/kubelet.conf", "--v=2"}, Files{}},
		{"an empty value is none", []string{"kubelet", "--config=", "--config-dir="}, Files{}},
		{"names that only begin alike", []string{"kubelet", "--kubeconfig", "/k", "--config-directory=/x", "--configs", "/y", "--bootstrap-kubeconfig=/b"}, Files{}},
		{"nothing after --", []string{"kubelet", "--config=/c", "--", "--config-dir=/d"}, Files{Config: "/c"}},
		{"shorthands and values are no flags", []string{"kubelet", "-v", "4", "config-dir", "/d"}, Files{}},
		{"cleaned", []string{"kubelet", "--config-dir=/etc/kubernetes//kubelet.conf.d/"}, Files{ConfigDir: "/etc/kubernetes/kubelet.conf.d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FromCommandLine(tc.argv, noCwd)
			if err != nil || got != tc.want {
				t.Fatalf("FromCommandLine(%q) = %+v, %v; want %+v", tc.argv, got, err, tc.want)
			}
		})
	}
}

func TestFromCommandLineRelativePaths(t *testing.T) {
	asked := 0
	cwd := func() (string, error) { asked++; return "/var/lib/kubelet", nil }
	got, err := FromCommandLine([]string{"kubelet", "--config", "config.yaml", "--config-dir=../../../etc/kubernetes/kubelet.conf.d"}, cwd)
	want := Files{"/var/lib/kubelet/config.yaml", "/etc/kubernetes/kubelet.conf.d"}
	if err != nil || got != want {
		t.Fatalf("got %+v, %v; want %+v", got, err, want)
	}
	if asked != 1 {
		t.Fatalf("the working directory was read %d times, want once", asked)
	}
	_, err = FromCommandLine([]string{"kubelet", "--config-dir", "conf.d"}, noCwd)
	if err == nil || !strings.Contains(err.Error(), `--config-dir "conf.d" is relative`) {
		t.Fatalf("a relative path with no working directory: %v", err)
	}
}

func TestFromCommandLineMissingValue(t *testing.T) {
	_, err := FromCommandLine([]string{"kubelet", "--config-dir"}, noCwd)
	if err == nil || !strings.Contains(err.Error(), "--config-dir with no value") {
		t.Fatalf("got %v", err)
	}
}

// fakeHost is a /proc with one kubelet process and a host root holding
// what its mounts would.
type fakeHost struct {
	proc, root string
	pid        int
}

func newFakeHost(t *testing.T, cwd string, argv ...string) fakeHost {
	t.Helper()
	h := fakeHost{proc: t.TempDir(), root: t.TempDir(), pid: 4242}
	dir := filepath.Join(h.proc, strconv.Itoa(h.pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cmdline"), []byte(strings.Join(argv, "\x00")+"\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	if cwd != "" {
		if err := os.Symlink(cwd, filepath.Join(dir, "cwd")); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func (h fakeHost) mkdir(t *testing.T, host string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(h.root, host), 0o755); err != nil {
		t.Fatal(err)
	}
}

func (h fakeHost) write(t *testing.T, host string) {
	t.Helper()
	h.mkdir(t, filepath.Dir(host))
	if err := os.WriteFile(filepath.Join(h.root, host), []byte("kind: KubeletConfiguration\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (h fakeHost) locator() Locator {
	return Locator{Pid: func() (int, error) { return h.pid, nil }, Proc: h.proc, HostRoot: h.root, SuggestedConfigDir: "/etc/kubernetes/kubelet.conf.d"}
}

func TestLocateMapsHostPathsUnderTheHostRoot(t *testing.T) {
	h := newFakeHost(t, "/var/lib/kubelet", "/usr/bin/kubelet", "--config", "config.yaml", "--config-dir=/etc/kubernetes/kubelet.conf.d")
	h.write(t, "/var/lib/kubelet/config.yaml")
	h.mkdir(t, "/etc/kubernetes/kubelet.conf.d")
	got, err := h.locator().Locate()
	if err != nil {
		t.Fatal(err)
	}
	want := Located{
		Host:  Files{"/var/lib/kubelet/config.yaml", "/etc/kubernetes/kubelet.conf.d"},
		Agent: Files{filepath.Join(h.root, "var/lib/kubelet/config.yaml"), filepath.Join(h.root, "etc/kubernetes/kubelet.conf.d")},
	}
	if got != want {
		t.Fatalf("Locate = %+v, want %+v", got, want)
	}
}

func TestLocateRefusesAKubeletWithoutConfigDir(t *testing.T) {
	h := newFakeHost(t, "/", "/usr/bin/kubelet", "--config=/var/lib/kubelet/config.yaml", "--kubeconfig=/etc/kubernetes/kubelet.conf")
	h.write(t, "/var/lib/kubelet/config.yaml")
	_, err := h.locator().Locate()
	var noDir *NoConfigDirError
	if !errors.As(err, &noDir) {
		t.Fatalf("Locate: %v, want a *NoConfigDirError", err)
	}
	if want := "add --config-dir=/etc/kubernetes/kubelet.conf.d to the kubelet's flags (KUBELET_EXTRA_ARGS)"; !strings.Contains(err.Error(), want) {
		t.Fatalf("the refusal %q does not say %q", err, want)
	}
}

func TestLocateSaysWhatToMount(t *testing.T) {
	h := newFakeHost(t, "/", "/opt/bin/kubelet", "--config=/etc/k0s/kubelet.yaml", "--config-dir=/etc/k0s/kubelet.d")
	_, err := h.locator().Locate()
	if want := "the kubelet's --config /etc/k0s/kubelet.yaml is not mounted into the agent at " + filepath.Join(h.root, "etc/k0s/kubelet.yaml"); err == nil || !strings.Contains(err.Error(), want) ||
		!strings.Contains(err.Error(), "mount the host's /etc/k0s at "+filepath.Join(h.root, "etc/k0s")+" read-only") {
		t.Fatalf("Locate: %v, want it to say %q and what to mount", err, want)
	}
	h.write(t, "/etc/k0s/kubelet.yaml")
	_, err = h.locator().Locate()
	if err == nil || !strings.Contains(err.Error(), "mount the host's /etc/k0s/kubelet.d at "+filepath.Join(h.root, "etc/k0s/kubelet.d")+" read-write") {
		t.Fatalf("Locate: %v, want it to say which directory to mount read-write", err)
	}
	// Seen, but read-only (under a read-only mount of its parent).
	h.mkdir(t, "/etc/k0s/kubelet.d")
	err = readOnly(t, filepath.Join(h.root, "etc/k0s/kubelet.d"), func() error { _, err := h.locator().Locate(); return err })
	if err == nil || !strings.Contains(err.Error(), "not writable") || !strings.Contains(err.Error(), "at "+filepath.Join(h.root, "etc/k0s/kubelet.d")+" read-write") {
		t.Fatalf("Locate: %v, want it to say the directory is not writable and to mount it read-write", err)
	}
	// An explicit --kubelet-config stands in for the one on the command line.
	l := h.locator()
	l.Config = "/elsewhere/config.yaml"
	got, err := l.Locate()
	if err != nil || got.Agent.Config != "/elsewhere/config.yaml" || got.Agent.ConfigDir != filepath.Join(h.root, "etc/k0s/kubelet.d") {
		t.Fatalf("Locate with Config set = %+v, %v", got, err)
	}
}

func TestLocateWithoutAKubelet(t *testing.T) {
	h := newFakeHost(t, "/", "kubelet")
	l := h.locator()
	l.Pid = func() (int, error) { return 0, nil }
	if _, err := l.Locate(); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("no process: %v, want ErrNotRunning", err)
	}
	l.Pid = func() (int, error) { return 99999, nil }
	if _, err := l.Locate(); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("a process gone: %v, want ErrNotRunning", err)
	}
}

// readOnly runs f with dir read-only to it: a read-only bind mount in a
// mount namespace of f's thread alone where the test runs as root (whom
// no file mode stops), else the directory's mode.
func readOnly(t *testing.T, dir string, f func() error) error {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o755)
		return f()
	}
	done := make(chan error)
	go func() {
		// Never unlocked: the thread, and its mount namespace, end with
		// this goroutine.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			done <- fmt.Errorf("setup: %w", err)
			return
		}
		for _, m := range []struct {
			src   string
			flags uintptr
		}{{"", unix.MS_PRIVATE | unix.MS_REC}, {dir, unix.MS_BIND}, {dir, unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY}} {
			target := dir
			if m.src == "" {
				target = "/"
			}
			if err := unix.Mount(m.src, target, "", m.flags, ""); err != nil {
				done <- fmt.Errorf("setup: mount %s: %w", target, err)
				return
			}
		}
		done <- f()
	}()
	err := <-done
	if err != nil && strings.HasPrefix(err.Error(), "setup: ") {
		t.Skipf("no read-only mount here: %v", err)
	}
	return err
}

// The agent has no capabilities, and the kernel refuses it the working
// directory of a kubelet that has them: a relative path then says to
// give the agent the paths.
func TestLocateARelativePathWithoutTheWorkingDirectory(t *testing.T) {
	h := newFakeHost(t, "", "/usr/bin/kubelet", "--config-dir=conf.d")
	_, err := h.locator().Locate()
	if err == nil || !strings.Contains(err.Error(), `--config-dir "conf.d" is relative`) || !strings.Contains(err.Error(), "--target-dir, --kubelet-config") {
		t.Fatalf("Locate: %v", err)
	}
}

// The kubelet's --root-dir is read off its command line as its files are:
// the kubelet's own default where it has none, and what to mount where
// the agent does not see it writable.
func TestRootDirIsTheKubeletsOwn(t *testing.T) {
	h := newFakeHost(t, "/", "/usr/bin/kubelet", "--config-dir=/etc/kubernetes/kubelet.conf.d")
	h.mkdir(t, "/var/lib/kubelet")
	got, err := h.locator().RootDir()
	if want := filepath.Join(h.root, "var/lib/kubelet"); err != nil || got != want {
		t.Fatalf("RootDir with no --root-dir = %q, %v; want the kubelet's default %q", got, err, want)
	}
	h = newFakeHost(t, "/data", "/usr/bin/kubelet", "--root_dir", "kubelet/", "--config-dir=/etc/kubernetes/kubelet.conf.d")
	_, err = h.locator().RootDir()
	if want := "the kubelet's --root-dir /data/kubelet is not mounted into the agent at " + filepath.Join(h.root, "data/kubelet"); err == nil || !strings.Contains(err.Error(), want) ||
		!strings.Contains(err.Error(), "mount the host's /data/kubelet at "+filepath.Join(h.root, "data/kubelet")+" read-write") {
		t.Fatalf("RootDir: %v, want it to say %q and what to mount", err, want)
	}
	h.mkdir(t, "/data/kubelet")
	err = readOnly(t, filepath.Join(h.root, "data/kubelet"), func() error { _, err := h.locator().RootDir(); return err })
	if err == nil || !strings.Contains(err.Error(), "not writable") {
		t.Fatalf("RootDir of a read-only mount: %v, want it not writable", err)
	}
	got, err = h.locator().RootDir()
	if want := filepath.Join(h.root, "data/kubelet"); err != nil || got != want {
		t.Fatalf("RootDir = %q, %v; want %q", got, err, want)
	}
	l := h.locator()
	l.Pid = func() (int, error) { return 0, nil }
	if _, err := l.RootDir(); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("no kubelet: %v, want ErrNotRunning", err)
	}
}
