package powercut

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"nodeconfig.io/test/framework/proc"
)

const envWriter = "POWERCUT_TEST_WRITER"

func TestMain(m *testing.M) {
	MaybeExec()
	if dir := os.Getenv(envWriter); dir != "" {
		if err := write(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// write is the launched program: writes, some synced and some not.
func write(dir string) error {
	at := func(name string) string { return filepath.Join(dir, name) }
	create := func(name, data string, sync func(*os.File) error) error {
		f, err := os.Create(at(name))
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := f.WriteString(data); err != nil {
			return err
		}
		if sync != nil {
			return sync(f)
		}
		return nil
	}
	fsync := func(f *os.File) error { return f.Sync() }
	fdatasync := func(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }
	syncDir := func(name string) error {
		f, err := os.Open(at(name))
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Sync()
	}
	steps := []func() error{
		// Before the directory's fsync: every name here survives.
		func() error { return create("synced", "s", fdatasync) },
		func() error { return create("nodata", "lost", nil) },
		func() error { return os.Mkdir(at("sub"), 0o750) },
		func() error { return create("sub/f", "f", fsync) },
		func() error { return syncDir("sub") },
		func() error { return create(".old2.tmp", "v2", fsync) },
		func() error { return os.Rename(at(".old2.tmp"), at("old2")) },
		func() error { return syncDir(".") },
		// After it: no name made here survives, nor a rename.
		func() error { return create("late", "late", fsync) },
		func() error { return create(".old.tmp", "v2", fsync) },
		func() error { return os.Rename(at(".old.tmp"), at("old")) },
		func() error { return os.WriteFile(at("ow"), []byte("v2"), 0o644) },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("step %d: %w", i, err)
		}
	}
	return nil
}

// The model's canary: a program's writes, synced and not, then a cut.
// What survives is what the program synced, file and directory, no more.
func TestCutKeepsOnlyWhatWasSynced(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"old": "v1", "old2": "v1", "ow": "v1"} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	disk := New(t, root)
	self, env, err := disk.Command(mustExecutable(t))
	if err != nil {
		t.Fatal(err)
	}
	p, err := proc.Start("writer", self, nil, filepath.Join(dir, "writer.log"), append(env, envWriter+"="+root)...)
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if err := p.ExitError(); err != nil {
		t.Fatalf("the writer: %v\n%s", err, p.Tail(2000))
	}
	// Before the cut everything is there, as the page cache has it.
	want := map[string]string{"synced": "s", "nodata": "lost", "sub/f": "f", "old2": "v2", "late": "late", "old": "v2", "ow": "v2"}
	if got := tree(t, root); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("before the cut: %v, want %v", got, want)
	}
	if n := disk.Syncs(); n != 7 {
		t.Fatalf("%d sync calls recorded, want the writer's 7", n)
	}
	if err := disk.Cut(); err != nil {
		t.Fatal(err)
	}
	want = map[string]string{"synced": "s", "nodata": "", "sub/f": "f", "old2": "v2", "old": "v1", "ow": "v1"}
	if got := tree(t, root); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the cut: %v, want %v", got, want)
	}
	// What is left is durable: a second cut changes nothing.
	if err := disk.Cut(); err != nil {
		t.Fatal(err)
	}
	if got := tree(t, root); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after a second cut: %v, want %v", got, want)
	}
}

func mustExecutable(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return self
}

// tree maps each regular file under root to its content.
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(path string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		rel, _ := filepath.Rel(root, path)
		out[rel] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
