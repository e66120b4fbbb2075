package guard

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"nodeconfig.io/services/servekit/atomicfile"
)

// Action is what one run of the guard did.
type Action int

const (
	// NoTrial: nothing is on trial; the guard did nothing.
	NoTrial Action = iota
	// Counted: the start was counted and the kubelet starts on the trial.
	Counted
	// FellBack: the trial had too many starts; last-known-good is back.
	FellBack
	// Skipped: the guard could not tell what to do and did nothing.
	Skipped
	// RuntimeDown: the container runtime takes no connection, so the
	// kubelet cannot start whatever its config: the start is not counted.
	RuntimeDown
)

// Outcome is one run of the guard.
type Outcome struct {
	Action Action
	// Starts are the kubelet's starts under the trial since it was last
	// seen healthy, this one included.
	Starts int
	// Message says what the guard did, one line.
	Message string
}

// Check runs the guard once, before a kubelet start: it counts the start
// under the trial in dir, and past the trial's threshold writes
// last-known-good over the trial's drop-in and records that it did.
//
// It never fails: a guard that cannot tell what to do does nothing, which
// is what a node without a guard does. Every step is one atomic file
// replacement, so a crash between two steps leaves a state the next run
// completes: the count is written first (a start counts even if the guard
// dies right after), the fallback record before the drop-in (an agent that
// starts in between learns of the fallback before it repairs the drop-in),
// and a trial past its threshold falls back again at every start until the
// agent clears it.
func Check(dir string, now time.Time) Outcome {
	t, err := readTrial(dir)
	if err != nil {
		return Outcome{Action: Skipped, Message: fmt.Sprintf("cannot read the trial in %s, doing nothing: %v", dir, err)}
	}
	if t == nil {
		return Outcome{Action: NoTrial, Message: "no config on trial: nothing to do"}
	}
	if err := runtimeListens(t.RuntimeEndpoint); err != nil {
		return Outcome{Action: RuntimeDown, Message: fmt.Sprintf("the container runtime is not ready (%v): a kubelet start now says nothing of the trial of %s, so it is not counted", err, t.Identity)}
	}
	var notes []string
	startsPath := filepath.Join(dir, StartsFile)
	prev, err := readCount(startsPath)
	if err != nil {
		// Only a torn disk makes a renamed file unreadable. Counting from
		// zero can only delay a fallback by one threshold; counting it as
		// past the threshold could fail a good config for good.
		notes = append(notes, fmt.Sprintf("start count unreadable, counted from 0 (%v)", err))
	}
	cur := prev
	if prev.Identity != t.Identity || prev.Epoch == "" {
		// A new trial, or a count that was lost: a fresh count, which no
		// earlier healthy mark applies to.
		cur = count{Identity: t.Identity, Epoch: newEpoch()}
	}
	base := 0
	switch h, err := readCount(filepath.Join(dir, HealthyFile)); {
	case err != nil:
		notes = append(notes, fmt.Sprintf("healthy mark unreadable, ignored (%v)", err))
	case h.Identity == cur.Identity && h.Epoch == cur.Epoch && h.Starts <= cur.Starts:
		base = h.Starts
	}
	cur.Starts++
	starts := cur.Starts
	if err := writeCount(startsPath, cur, false); err != nil {
		notes = append(notes, fmt.Sprintf("cannot record the start: %v", err))
	}
	since := starts - base
	threshold := t.threshold()
	if since <= threshold {
		return Outcome{Action: Counted, Starts: since, Message: withNotes(fmt.Sprintf(
			"kubelet start %d of %d under the trial of %s without being seen healthy: starting it on the trial config", since, threshold, t.Identity), notes)}
	}
	return fallBack(dir, t, since, now, notes)
}

// fallBack records the fallback, then puts last-known-good over the trial's
// drop-in. The trial file stays (it is the agent's): every later start under
// it falls back again, which changes nothing once the drop-in is right.
func fallBack(dir string, t *Trial, since int, now time.Time, notes []string) Outcome {
	threshold := t.threshold()
	fb, err := ReadFallback(dir)
	if err != nil || fb == nil || fb.Identity != t.Identity {
		fb = &Fallback{
			Version: formatVersion, Identity: t.Identity, At: now.UTC(), Starts: since, Threshold: threshold,
			Target: t.Target, Restored: t.Restored(),
			Message: fmt.Sprintf("the kubelet started %d times under the trial of %s without the agent seeing it healthy; the start guard put back %s",
				since, t.Identity, t.Restored()),
		}
		// Even if the record cannot be written, the drop-in is: the node's
		// recovery comes first, and the next start tries the record again.
		if err := writeJSON(filepath.Join(dir, FallbackFile), fb, false); err != nil {
			notes = append(notes, fmt.Sprintf("cannot record the fallback for the agent: %v", err))
		}
	} else {
		notes = append(notes, "fell back already at "+fb.At.Format(time.RFC3339))
	}
	what, err := ensureDropIn(t.Target, t.LastKnownGood)
	if err != nil {
		return Outcome{Action: FellBack, Starts: since, Message: withNotes(fmt.Sprintf(
			"kubelet start %d under the trial of %s is past %d without being seen healthy, but putting back %s failed: %v",
			since, t.Identity, threshold, t.Restored(), err), notes)}
	}
	return Outcome{Action: FellBack, Starts: since, Message: withNotes(fmt.Sprintf(
		"kubelet start %d under the trial of %s is past %d without being seen healthy: %s %s (%s); the agent records it as the trial's late error",
		since, t.Identity, threshold, what, t.Target, t.Restored()), notes)}
}

// ensureDropIn makes target hold lkg (nil: absent) and says what it did.
func ensureDropIn(target string, lkg []byte) (string, error) {
	cur, err := os.ReadFile(target)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	switch {
	case lkg == nil && !exists:
		return "kept absent", nil
	case lkg == nil:
		return "removed", atomicfile.Remove(target)
	case exists && bytes.Equal(cur, lkg):
		return "kept", nil
	}
	// A directory that is not there is not the kubelet's drop-in
	// directory (a trial naming another host's path): nothing is created.
	return "wrote", writeInExistingDir(target, lkg)
}

// writeInExistingDir replaces path with data, readable by all, durably. Its
// directory must exist already: atomicfile would create a missing one, but a
// missing drop-in or unit directory is not the host's to fill in.
func writeInExistingDir(path string, data []byte) error {
	if _, err := os.Stat(filepath.Dir(path)); err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o644, 0o755)
}

func withNotes(msg string, notes []string) string {
	if len(notes) == 0 {
		return msg
	}
	return msg + " [" + strings.Join(notes, "; ") + "]"
}

// Usage is the guard command's one-line usage.
const Usage = "usage: nodeconfig-guard [--dir DIR]: run before every kubelet start (ExecStartPre=); always exits 0"

// Main is the guard command: it parses args (--dir), runs Check and writes
// one line to stderr. It never fails, not even on bad flags or a panic: a
// guard must not be the reason a kubelet does not start.
func Main(args []string, stderr io.Writer) {
	var msg string
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprintf("internal error, doing nothing: %v", r)
		}
		fmt.Fprintln(stderr, "nodeconfig-guard: "+msg)
	}()
	fs := flag.NewFlagSet("nodeconfig-guard", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dir := fs.String("dir", DefaultDir, "directory of the trial files")
	if err := fs.Parse(args); err != nil {
		msg = fmt.Sprintf("%v, doing nothing; %s", err, Usage)
		if errors.Is(err, flag.ErrHelp) {
			msg = Usage
		}
		return
	}
	if fs.NArg() > 0 {
		msg = fmt.Sprintf("unexpected arguments %q, doing nothing; %s", fs.Args(), Usage)
		return
	}
	msg = Check(*dir, time.Now()).Message
}

// runtimeListens says whether the container runtime's socket takes a
// connection (nil for no endpoint: not checked). A plain connect is enough:
// a runtime that listens lets the kubelet start.
func runtimeListens(endpoint string) error {
	if endpoint == "" {
		return nil
	}
	path := strings.TrimPrefix(endpoint, "unix://")
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}
