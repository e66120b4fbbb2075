package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
)

func TestWriteReplacesWholeWithPermAndLeavesNoTemp(t *testing.T) {
	for name, write := range map[string]func(string, []byte, os.FileMode, os.FileMode) error{"Write": Write, "WriteUnsynced": WriteUnsynced} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "made", "here")
			path := filepath.Join(dir, "a.conf")
			if err := write(path, []byte("one"), 0o604, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := write(path, []byte("two"), 0o604, 0o755); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil || string(got) != "two" {
				t.Fatalf("read %q, %v; want two", got, err)
			}
			fi, err := os.Stat(path)
			if err != nil || fi.Mode().Perm() != 0o604 {
				t.Fatalf("mode %v, %v; want 0604 (not the umask's) even over an earlier file's 0600", fi.Mode(), err)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 {
				t.Fatalf("directory holds %d entries, want only a.conf: %v", len(entries), entries)
			}
		})
	}
}

func TestUnsyncedWriteThatCannotReplaceLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	// A directory holding a file where the file should be: the rename fails.
	path := filepath.Join(dir, "a.conf")
	if err := os.MkdirAll(filepath.Join(path, "in"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteUnsynced(path, []byte("x"), 0o644, 0o755); err == nil {
		t.Fatal("replacing a non-empty directory succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "a.conf" {
		t.Fatalf("directory holds %v, want only a.conf", entries)
	}
}

func TestUnsyncedTempFilesAreTheOnesCleanTempsFinds(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.conf")
	// A temp file WriteUnsynced would leave if killed before its rename.
	f, err := createTemp(path)
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	CleanTemps(path)
	if _, err := os.Stat(f.Name()); !os.IsNotExist(err) {
		t.Fatalf("%s is still there after CleanTemps (%v)", f.Name(), err)
	}
}

func TestCleanTempsRemovesOnlyWhatAKilledWriteLeft(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.conf")
	for name, data := range map[string]string{".a.conf123456": "part", "a.conf": "whole", ".b.conf42": "other"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	CleanTemps(path)
	var left []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if len(left) != 2 || left[0] != ".b.conf42" || left[1] != "a.conf" {
		t.Fatalf("left %v, want [.b.conf42 a.conf]", left)
	}
}

func TestRemoveOfAMissingFileIsNotAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gone")
	if err := Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("x"), 0o600, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("stat after Remove: %v", err)
	}
}

func TestWriteFromStreamsAndKeepsTheOldFileOnAReadError(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bin", "tool")
	big := strings.Repeat("0123456789abcdef", 1<<16)
	if err := WriteFrom(path, strings.NewReader(big), 0o755, 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != big {
		t.Fatalf("read %d bytes, %v; want the reader's %d", len(got), err, len(big))
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("mode %v, %v; want 0755", fi.Mode(), err)
	}
	// A reader that fails part-way replaces nothing and leaves no temp.
	broken := io.MultiReader(strings.NewReader("part"), iotest.ErrReader(errors.New("read failed")))
	if err := WriteFrom(path, broken, 0o755, 0o755); err == nil {
		t.Fatal("a failing reader replaced the file")
	}
	if got, _ := os.ReadFile(path); string(got) != big {
		t.Fatalf("after a failed write the file holds %d bytes, want the old %d", len(got), len(big))
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Fatalf("directory holds %v, want only tool", entries)
	}
}
