// Package materialize writes the active payload where its consumer (e.g. a
// kubelet drop-in directory) reads it. A reader sees the old file or the new
// one, never a partial one, even across a crash.
package materialize

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Target is one file in a directory.
type Target struct {
	Dir  string
	Name string
}

// Path is the file's full path.
func (t Target) Path() string { return filepath.Join(t.Dir, t.Name) }

// Write replaces the file atomically: temp file, fsync, rename, fsync dir.
func (t Target) Write(data []byte) error {
	if err := os.MkdirAll(t.Dir, 0o755); err != nil {
		return fmt.Errorf("create target directory: %w", err)
	}
	tmp, err := os.CreateTemp(t.Dir, "."+t.Name+".tmp-*")
	if err != nil {
		return fmt.Errorf("create temp file in %s: %w", t.Dir, err)
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName) // no-op after a successful rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", tmpName, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("chmod %s: %w", tmpName, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("fsync %s: %w", tmpName, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmpName, err)
	}
	if err := os.Rename(tmpName, t.Path()); err != nil {
		return fmt.Errorf("rename into %s: %w", t.Path(), err)
	}
	return syncDir(t.Dir)
}

// Remove deletes the file so the consumer falls back to its local default.
// A missing file is not an error.
func (t Target) Remove() error {
	if err := os.Remove(t.Path()); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("remove %s: %w", t.Path(), err)
	}
	return syncDir(t.Dir)
}

// Matches reports whether the file holds exactly data (want nil: the file
// must not exist).
func (t Target) Matches(want []byte) (bool, error) {
	got, err := os.ReadFile(t.Path())
	if errors.Is(err, fs.ErrNotExist) {
		return want == nil, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", t.Path(), err)
	}
	return want != nil && bytes.Equal(got, want), nil
}

// Ensure makes the file hold want (nil: absent) and reports whether it had
// to change anything.
func (t Target) Ensure(want []byte) (changed bool, err error) {
	ok, err := t.Matches(want)
	if err != nil || ok {
		return false, err
	}
	if want == nil {
		return true, t.Remove()
	}
	return true, t.Write(want)
}

// CleanTemps removes temp files a crash left behind.
func (t Target) CleanTemps() {
	matches, _ := filepath.Glob(filepath.Join(t.Dir, "."+t.Name+".tmp-*"))
	for _, m := range matches {
		_ = os.Remove(m)
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open %s for fsync: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}
