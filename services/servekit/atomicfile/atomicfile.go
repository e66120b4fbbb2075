// Package atomicfile replaces a file whole and durably: a reader sees the old
// contents or the new, never a part, and after a crash the rename has either
// happened or not. renameio writes, fsyncs and renames the temp file; the
// directory's fsync, which makes the rename itself durable, is added here.
package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"
)

// Write replaces path with data, creating its directory (dirPerm) when it is
// missing. The file gets perm whatever the umask or an earlier file had.
func Write(path string, data []byte, perm, dirPerm os.FileMode) error {
	return WriteFrom(path, bytes.NewReader(data), perm, dirPerm)
}

// WriteFrom replaces path with what r yields, as Write does, streaming it:
// a large file (an executable copied to the host) never sits in memory whole.
func WriteFrom(path string, r io.Reader, perm, dirPerm os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, dirPerm); err != nil {
		return fmt.Errorf("create directory %s: %w", dir, err)
	}
	// The temp file sits beside path so the rename never crosses a mount.
	f, err := renameio.NewPendingFile(path, renameio.WithTempDir(dir), renameio.WithStaticPermissions(perm))
	if err != nil {
		return fmt.Errorf("create temp file for %s: %w", path, err)
	}
	defer f.Cleanup()
	if _, err := io.Copy(f, r); err != nil {
		return fmt.Errorf("write temp file for %s: %w", path, err)
	}
	if err := f.CloseAtomicallyReplace(); err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	return SyncDir(dir)
}

// WriteUnsynced replaces path with data as Write does, whole for every
// reader, but without fsync: a crash of the machine may lose it (tests and
// benchmarks only, where thousands of simulated nodes share one disk).
func WriteUnsynced(path string, data []byte, perm, dirPerm os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, dirPerm); err != nil {
		return fmt.Errorf("create directory %s: %w", dir, err)
	}
	f, err := createTemp(path)
	if err != nil {
		return fmt.Errorf("create temp file for %s: %w", path, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("replace %s: %w", path, err)
	}
	return nil
}

// Remove deletes path durably; a missing file is not an error.
func Remove(path string) error {
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return SyncDir(filepath.Dir(path))
}

// createTemp creates a temp file beside path, named as Write's are, so that
// CleanTemps finds it after a kill.
func createTemp(path string) (*os.File, error) {
	return os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path))
}

// RemoveUnsynced deletes path without fsync of its directory (tests and
// benchmarks only); a missing file is not an error.
func RemoveUnsynced(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

// TempGlob matches the temp files Write or WriteUnsynced leaves beside path when it is killed
// between creating one and renaming it.
func TempGlob(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+"[0-9]*")
}

// CleanTemps removes what a killed Write or WriteUnsynced left beside path.
func CleanTemps(path string) {
	matches, _ := filepath.Glob(TempGlob(path))
	for _, m := range matches {
		_ = os.Remove(m)
	}
}

// SyncDir makes the directory's entries (a rename, a removal) durable.
func SyncDir(dir string) error {
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
