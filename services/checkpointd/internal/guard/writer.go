package guard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"nodeconfig.io/services/servekit/atomicfile"
)

// ErrFellBack is MarkHealthy's refusal: the guard already fell back from the
// trial, so the kubelet seen healthy runs last-known-good, not the trial.
var ErrFellBack = errors.New("the start guard fell back from this trial")

// Writer is the agent's side: it keeps the trial file in line with the
// agent's records and tells the guard when the kubelet is healthy.
type Writer struct {
	Dir string
	// NoSync skips fsync (tests and benchmarks only): a crash of the machine
	// may lose the last write.
	NoSync bool
	// RuntimeEndpoint, when set, goes into every trial: the guard counts no
	// start while the container runtime takes no connection.
	RuntimeEndpoint string
	// HostTarget, when set, is the drop-in's path as the host sees it, where
	// the agent's mount puts it elsewhere: the guard runs on the host.
	HostTarget string
}

// Target is the drop-in's path for the guard: HostTarget, else the agent's.
func (w Writer) Target(agents string) string {
	if w.HostTarget != "" {
		return w.HostTarget
	}
	return agents
}

// Sync sets t as the trial, or clears the trial when t is nil: the agent
// calls it with Desired after every change of its records.
func (w Writer) Sync(t *Trial) error {
	if t == nil {
		return w.ClearTrial()
	}
	return w.SetTrial(*t)
}

// SetTrial makes t the trial; writing the same trial again changes nothing.
// A new trial starts with no starts against it, even if an earlier trial of
// the same version left a count: its healthy mark is set to that count
// before the trial file names it, so a crash in between forgives nothing
// the trial did.
func (w Writer) SetTrial(t Trial) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if t.RuntimeEndpoint == "" {
		t.RuntimeEndpoint = w.RuntimeEndpoint
	}
	if t.Threshold <= 0 {
		t.Threshold = DefaultThreshold
	}
	data, err := json.Marshal(trialFile{Version: formatVersion, Trial: t})
	if err != nil {
		return err
	}
	data = append(data, '\n')
	path := filepath.Join(w.Dir, TrialFile)
	if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, data) {
		return nil
	}
	if old, err := readTrial(w.Dir); err != nil || old == nil || old.Identity != t.Identity {
		if err := w.markHealthy(t.Identity); err != nil {
			return err
		}
	}
	if err := replaceFile(path, data, w.NoSync); err != nil {
		return fmt.Errorf("set the trial of %s: %w", t.Identity, err)
	}
	return nil
}

// ClearTrial ends the trial (promoted, rolled back, reset): the guard does
// nothing from its next run on.
func (w Writer) ClearTrial() error {
	if err := removeFile(filepath.Join(w.Dir, TrialFile), w.NoSync); err != nil {
		return fmt.Errorf("clear the trial: %w", err)
	}
	// The guard's start count stays: it is the guard's file, and keyed by
	// the trial, so a later trial never reads it without a new healthy mark.
	return removeFile(filepath.Join(w.Dir, HealthyFile), w.NoSync)
}

// MarkHealthy tells the guard that the kubelet is healthy on the trial id:
// the starts so far no longer count against it. The agent calls it when the
// consumer gate records HEALTHY on the active config. It refuses with
// ErrFellBack once the guard fell back from id.
func (w Writer) MarkHealthy(id Identity) error {
	fb, err := ReadFallback(w.Dir)
	if err != nil {
		return err
	}
	if fb != nil && fb.Identity == id {
		return fmt.Errorf("%w: %s", ErrFellBack, fb.Message)
	}
	return w.markHealthy(id)
}

// markHealthy writes the healthy mark of id at the guard's current count.
// A start the guard counts while this runs is either in the count read here
// (forgiven: it is at most the one start that raced with the health this
// records) or counted after it; no write of the guard's is lost, as the mark
// is the agent's own file.
func (w Writer) markHealthy(id Identity) error {
	c, err := readCount(filepath.Join(w.Dir, StartsFile))
	if err != nil || c.Identity != id {
		// No count of id yet, or one the guard will start over (see
		// Check): nothing to forgive.
		c = count{}
	}
	if err := writeCount(filepath.Join(w.Dir, HealthyFile), count{Identity: id, Epoch: c.Epoch, Starts: c.Starts}, w.NoSync); err != nil {
		return fmt.Errorf("mark %s healthy for the start guard: %w", id, err)
	}
	return nil
}

// MarkHealthy is Writer{Dir: dir}.MarkHealthy(id).
func MarkHealthy(dir string, id Identity) error { return Writer{Dir: dir}.MarkHealthy(id) }

// ReadFallback returns the guard's record that it fell back, nil when there
// is none. The agent reads it at start, before it repairs the drop-in, and
// before it records the kubelet healthy: a matching trial gets a late error
// (records.ReasonStartGuardFellBack), then ClearFallback.
func ReadFallback(dir string) (*Fallback, error) {
	var f Fallback
	found, err := readJSON(filepath.Join(dir, FallbackFile), &f)
	if err != nil || !found {
		return nil, err
	}
	if f.Version != formatVersion {
		return nil, fmt.Errorf("%s has format version %d, want %d", FallbackFile, f.Version, formatVersion)
	}
	return &f, nil
}

// ClearFallback removes the record f once the agent has recorded it. A
// record that is no longer f (the guard fell back from another trial since)
// stays, to be read in turn; f nil removes whatever is there (an unreadable
// record: the guard writes a new one at its next fallback).
func ClearFallback(dir string, f *Fallback) error {
	if f != nil {
		cur, err := ReadFallback(dir)
		if err == nil && cur != nil && (cur.Identity != f.Identity || !cur.At.Equal(f.At)) {
			return nil
		}
	}
	return atomicfile.Remove(filepath.Join(dir, FallbackFile))
}
