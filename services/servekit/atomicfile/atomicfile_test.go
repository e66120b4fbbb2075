package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteReplacesWholeWithPermAndLeavesNoTemp(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "made", "here")
	path := filepath.Join(dir, "a.conf")
	if err := Write(path, []byte("one"), 0o644, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("two"), 0o644, 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "two" {
		t.Fatalf("read %q, %v; want two", got, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, %v; want 0644 even over an earlier file's 0600", fi.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only a.conf: %v", len(entries), entries)
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
