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

	"nodeconfig.io/services/servekit/atomicfile"
)

// ErrNoDir is a Target whose directory is not known yet (the kubelet's,
// before the agent has found it): nothing is read or written.
var ErrNoDir = errors.New("the target's directory is not known")

// Target is one file in a directory; an empty Dir is none known yet.
type Target struct {
	Dir  string
	Name string
	// NoSync skips fsync: readers still never see a partial file, but a
	// crash of the machine may lose the last write (tests and benchmarks
	// only).
	NoSync bool
}

// Path is the file's full path.
func (t Target) Path() string { return filepath.Join(t.Dir, t.Name) }

// Write replaces the file atomically, and durably unless NoSync.
func (t Target) Write(data []byte) error {
	if t.Dir == "" {
		return ErrNoDir
	}
	if t.NoSync {
		return atomicfile.WriteUnsynced(t.Path(), data, 0o644, 0o755)
	}
	return atomicfile.Write(t.Path(), data, 0o644, 0o755)
}

// Remove deletes the file so the consumer falls back to its local default.
// A missing file is not an error.
func (t Target) Remove() error {
	if t.Dir == "" {
		return ErrNoDir
	}
	if t.NoSync {
		return atomicfile.RemoveUnsynced(t.Path())
	}
	return atomicfile.Remove(t.Path())
}

// Read returns what the file holds, nil when it does not exist.
func (t Target) Read() ([]byte, error) {
	if t.Dir == "" {
		return nil, ErrNoDir
	}
	got, err := os.ReadFile(t.Path())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", t.Path(), err)
	}
	return got, nil
}

// Matches reports whether the file holds exactly data (want nil: the file
// must not exist).
func (t Target) Matches(want []byte) (bool, error) {
	got, err := t.Read()
	if err != nil {
		return false, err
	}
	if got == nil {
		return want == nil, nil
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
	if t.Dir != "" {
		atomicfile.CleanTemps(t.Path())
	}
}
