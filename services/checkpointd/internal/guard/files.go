// Package guard recovers a node without any pod: a host-side check run
// before each kubelet start (systemd ExecStartPre=) that puts last-known-good
// back over a trial's drop-in once the kubelet has started too often under
// the trial without the agent seeing it healthy, as Dynamic Kubelet
// Config's kubelet counted its own start-ups.
//
// The agent and the guard talk through small files in one directory, each
// replaced whole (temp file, fsync, rename, fsync of the directory) and each
// with one writer, so that no write of one is lost to the other's:
//
//	trial.json      agent: the config on trial, its drop-in, last-known-good's bytes
//	trial.healthy   agent: the start count at which the kubelet was last seen healthy
//	trial.starts    guard: the kubelet's starts under the trial
//	trial.fellback  guard: that it fell back, for the agent to record (the agent removes it)
//
// The guard's side (guard.go) reads and writes only these files and the
// trial's drop-in; desired.go is the agent's, deriving the trial from its
// records.
package guard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"nodeconfig.io/services/servekit/atomicfile"
)

// File names in the guard's directory.
const (
	TrialFile    = "trial.json"
	HealthyFile  = "trial.healthy"
	StartsFile   = "trial.starts"
	FallbackFile = "trial.fellback"
)

// DefaultDir is where the agent and the guard keep their files on a node:
// beside the agent's store, on the host.
const DefaultDir = "/var/lib/nodeconfig/guard"

// DefaultThreshold is how many kubelet starts a trial gets without being
// seen healthy: the agent's own restart onto the config, and two more.
const DefaultThreshold = 3

// formatVersion is the version of every file's format: a file of another
// version is not acted on.
const formatVersion = 1

// Identity names the config on trial: its ConfigMap's version and key.
type Identity struct {
	Namespace       string `json:"namespace,omitempty"`
	Name            string `json:"name,omitempty"`
	UID             string `json:"uid"`
	ResourceVersion string `json:"resourceVersion"`
	Key             string `json:"key"`
}

func (id Identity) String() string {
	return fmt.Sprintf("%s/%s key %s (uid %s, resourceVersion %s)", id.Namespace, id.Name, id.Key, id.UID, id.ResourceVersion)
}

// Trial is a config on trial on the node, and what to put back if the
// kubelet cannot start on it.
type Trial struct {
	Identity Identity `json:"identity"`
	// Target is the drop-in the trial wrote, an absolute path.
	Target string `json:"target"`
	// LastKnownGood is what the guard writes over Target; nil is the local
	// default (Target is removed). Embedded, not a path, so that one rename
	// makes the trial and its way back durable together.
	LastKnownGood []byte `json:"lastKnownGood"`
	// LastKnownGoodName describes last-known-good in messages.
	LastKnownGoodName string `json:"lastKnownGoodName,omitempty"`
	// Threshold is how many starts the trial gets without being seen
	// healthy (0: DefaultThreshold).
	Threshold int `json:"threshold,omitempty"`
	// RuntimeEndpoint is the container runtime's socket as the host sees
	// it (unix://PATH; empty: not checked): a start while it takes no
	// connection is not counted.
	RuntimeEndpoint string `json:"runtimeEndpoint,omitempty"`
}

func (t Trial) threshold() int {
	if t.Threshold <= 0 {
		return DefaultThreshold
	}
	return t.Threshold
}

// Restored names what the guard puts back.
func (t Trial) Restored() string {
	switch {
	case t.LastKnownGood == nil:
		return "the local default"
	case t.LastKnownGoodName != "":
		return "last-known-good " + t.LastKnownGoodName
	default:
		return "last-known-good"
	}
}

// Validate refuses a trial the guard could not act on safely: it writes
// Target as root.
func (t Trial) Validate() error {
	switch {
	case t.Identity.UID == "":
		return errors.New("trial has no uid")
	case !filepath.IsAbs(t.Target) || filepath.Clean(t.Target) != t.Target || filepath.Dir(t.Target) == t.Target:
		return fmt.Errorf("trial target %q is not a clean absolute file path", t.Target)
	}
	return nil
}

type trialFile struct {
	Version int `json:"version"`
	Trial
}

// count is a start count under a trial: the guard's count of starts, or
// the count at which the agent last saw the kubelet healthy.
type count struct {
	Version  int      `json:"version"`
	Identity Identity `json:"identity"`
	// Epoch is drawn anew whenever the guard starts a count from zero; a
	// healthy mark holds the epoch of the count it was taken from, so that
	// a mark of a lost count never forgives the starts of the next one.
	Epoch  string `json:"epoch,omitempty"`
	Starts int    `json:"starts"`
}

// newEpoch draws an epoch. math/rand/v2 is seeded by the runtime from the
// kernel's randomness at exec, unlike a clock that a node without an RTC
// repeats at each boot, and it cannot fail.
func newEpoch() string { return strconv.FormatUint(rand.Uint64(), 36) }

// Fallback says that the guard put last-known-good back over a trial.
type Fallback struct {
	Version  int       `json:"version"`
	Identity Identity  `json:"identity"`
	At       time.Time `json:"at"`
	// Starts were the kubelet's starts since it was last seen healthy.
	Starts    int    `json:"starts"`
	Threshold int    `json:"threshold"`
	Target    string `json:"target"`
	// Restored describes what the guard put back.
	Restored string `json:"restored"`
	Message  string `json:"message"`
}

// readTrial returns the trial in dir, nil when there is none.
func readTrial(dir string) (*Trial, error) {
	var f trialFile
	found, err := readJSON(filepath.Join(dir, TrialFile), &f)
	if err != nil || !found {
		return nil, err
	}
	if f.Version != formatVersion {
		return nil, fmt.Errorf("%s has format version %d, want %d", TrialFile, f.Version, formatVersion)
	}
	if err := f.Trial.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", TrialFile, err)
	}
	return &f.Trial, nil
}

// readCount returns the count in path; a missing file is a zero count.
func readCount(path string) (count, error) {
	var c count
	found, err := readJSON(path, &c)
	switch {
	case err != nil:
		return count{}, err
	case !found:
		return count{}, nil
	case c.Version != formatVersion || c.Starts < 0:
		return count{}, fmt.Errorf("%s: version %d, starts %d", filepath.Base(path), c.Version, c.Starts)
	}
	return c, nil
}

func writeCount(path string, c count, noSync bool) error {
	c.Version = formatVersion
	return writeJSON(path, c, noSync)
}

// readJSON decodes path into v and reports whether it exists.
func readJSON(path string, v any) (bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("%s is corrupt: %w", path, err)
	}
	return true, nil
}

// writeJSON replaces path with v, unless it already holds exactly that.
func writeJSON(path string, v any, noSync bool) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, data) {
		return nil
	}
	return replaceFile(path, data, noSync)
}

// replaceFile replaces the guard file at path with data through atomicfile
// (durably unless noSync); the guard's directory is made private if missing.
// Temps are named ".NAME" and digits, a name no kubelet drop-in reader takes
// for a *.conf.
func replaceFile(path string, data []byte, noSync bool) error {
	// Each guard file has one writer, so its temps are its own to sweep.
	atomicfile.CleanTemps(path)
	if noSync {
		return atomicfile.WriteUnsynced(path, data, 0o600, 0o700)
	}
	return atomicfile.Write(path, data, 0o600, 0o700)
}

// removeFile deletes path, durably unless noSync; a missing file is not an
// error.
func removeFile(path string, noSync bool) error {
	if noSync {
		return atomicfile.RemoveUnsynced(path)
	}
	return atomicfile.Remove(path)
}
