package crash

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

func source(v int) *nodeconfigv1.ConfigSource {
	return &nodeconfigv1.ConfigSource{Namespace: "ns", Name: "cm", Uid: "crash-uid", ResourceVersion: strconv.Itoa(v), Key: "config.yaml"}
}

func version(src *nodeconfigv1.ConfigSource) int {
	v, _ := strconv.Atoi(src.GetResourceVersion())
	return v
}

// cycle takes version v through put, assign, activate and promote.
func cycle(ctx context.Context, c nodeconfigv1.CheckpointServiceClient, v int) error {
	return (&worker{client: c}).cycle(ctx, v)
}

// rpcKind names the four calls of a cycle.
type rpcKind int

const (
	rpcPut rpcKind = iota
	rpcAssign
	rpcActivate
	rpcPromote
	rpcKinds
)

func (k rpcKind) String() string {
	return [...]string{"PutCheckpoint", "SetAssigned", "Activate", "PromoteLastKnownGood"}[k]
}

// acked is the newest version the server acknowledged for each record.
type acked struct{ assigned, active, lastKnownGood int }

// worker runs cycles back to back against one checkpointd until a call
// fails, and keeps what the server acknowledged. Its fields other than
// started are read only after done is closed.
type worker struct {
	client nodeconfigv1.CheckpointServiceClient
	// promoteEvery promotes only every so many versions (0 or 1: each):
	// the node refuses to promote before the soak (1 s) ends, so a
	// promotion waits it out, and the versions between are superseded
	// before their soak ends, as quick edits are.
	promoteEvery int
	// started counts the calls issued so far: the killer reads it just
	// before the kill, so a failed call numbered at most that was issued
	// before the kill and never answered.
	started atomic.Uint64
	// starts tells the killer which call just began; a full buffer drops.
	starts chan rpcStart
	done   chan struct{}

	next      int // the version the next cycle writes
	acked     acked
	cycles    int
	failedSeq uint64
	failed    rpcKind
	err       error
	durations [rpcKinds][]time.Duration
}

type rpcStart struct {
	kind rpcKind
	seq  uint64
}

// run cycles versions next, next+1, ... until a call fails.
func (w *worker) run(ctx context.Context) {
	defer close(w.done)
	for {
		v := w.next
		w.next++
		if err := w.cycle(ctx, v); err != nil {
			w.err = err
			return
		}
		w.cycles++
	}
}

func (w *worker) cycle(ctx context.Context, v int) error {
	src := source(v)
	if err := w.call(rpcPut, func() error {
		_, err := w.client.PutCheckpoint(ctx, &nodeconfigv1.PutCheckpointRequest{Source: src, Data: map[string]string{"config.yaml": payloadFor(v)}})
		return err
	}); err != nil {
		return err
	}
	if err := w.call(rpcAssign, func() error {
		_, err := w.client.SetAssigned(ctx, &nodeconfigv1.SetAssignedRequest{Source: src, SoakSeconds: 1})
		return err
	}); err != nil {
		return err
	}
	w.acked.assigned = v
	var activated *nodeconfigv1.Records
	if err := w.call(rpcActivate, func() error {
		resp, err := w.client.Activate(ctx, &nodeconfigv1.ActivateRequest{})
		activated = resp.GetRecords()
		if err == nil && resp.GetOutcome() != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED {
			return fmt.Errorf("activate version %d: outcome %v, error %v", v, resp.GetOutcome(), resp.GetRecords().GetError())
		}
		return err
	}); err != nil {
		return err
	}
	w.acked.active = v
	if w.promoteEvery > 1 && v%w.promoteEvery != 0 {
		return nil
	}
	// Waited out between calls, never inside one: a kill during the wait
	// interrupts no call.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(records.SoakEnd(activated))):
	}
	if err := w.call(rpcPromote, func() error {
		_, err := w.client.PromoteLastKnownGood(ctx, &nodeconfigv1.PromoteLastKnownGoodRequest{Source: src})
		return err
	}); err != nil {
		return err
	}
	w.acked.lastKnownGood = v
	return nil
}

func (w *worker) call(kind rpcKind, f func() error) error {
	seq := w.started.Add(1)
	if w.starts != nil {
		select {
		case w.starts <- rpcStart{kind, seq}:
		default:
		}
	}
	start := time.Now()
	if err := f(); err != nil {
		w.failedSeq, w.failed = seq, kind
		return fmt.Errorf("%v: %w", kind, err)
	}
	w.durations[kind] = append(w.durations[kind], time.Since(start))
	return nil
}

// killedByUs reports whether err is what a call sees when its server dies
// under it or is gone; anything else is a real failure.
func killedByUs(err error) bool {
	return status.Code(err) == codes.Unavailable
}

// killMode is how a round picks the instant of its kill.
type killMode int

const (
	// killAtWrite kills the moment the target directory changes: Activate
	// is writing the file (temp file, or the file itself when the write is
	// not atomic), which is the instant a torn file would come from.
	killAtWrite killMode = iota
	// killInRPC waits for a chosen call of one of the round's first three
	// cycles to start and kills at a random point of that call's recent
	// duration: inside the store's commits and fsyncs.
	killInRPC
	// killAnywhere kills at a random instant of the round's first three
	// cycles, wherever the worker is, between calls included.
	killAnywhere
	killModes
)

func (m killMode) String() string {
	return [...]string{"at the target write", "inside a chosen call", "anywhere"}[m]
}

// pickMode draws a round's mode: two in five at the write, two in five in
// a chosen call, one in five anywhere.
func pickMode(rng *rand.Rand) killMode {
	switch n := rng.IntN(5); {
	case n < 2:
		return killAtWrite
	case n < 4:
		return killInRPC
	default:
		return killAnywhere
	}
}

// dirWatch wakes on the first change to a directory: inotify on the real
// directory, read through the runtime poller so a deadline can end the
// wait.
type dirWatch struct{ f *os.File }

func watchDir(dir string) (*dirWatch, error) {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	// Changes only: the test's own reads of the file must not wake it.
	const mask = syscall.IN_CREATE | syscall.IN_MODIFY | syscall.IN_MOVED_TO | syscall.IN_ATTRIB
	if _, err := syscall.InotifyAddWatch(fd, dir, mask); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("inotify_add_watch %s: %w", dir, err)
	}
	return &dirWatch{f: os.NewFile(uintptr(fd), "inotify:"+dir)}, nil
}

// wait returns at the first change after the watch began, or an error at
// the deadline.
func (d *dirWatch) wait(deadline time.Time) error {
	if err := d.f.SetReadDeadline(deadline); err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	_, err := d.f.Read(buf)
	return err
}

func (d *dirWatch) Close() error { return d.f.Close() }

// sigkill kills pid at once: the round's timing, not os.Process's
// bookkeeping, decides the instant.
func sigkill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

// median of ds, or fallback when there are none.
func median(ds []time.Duration, fallback time.Duration) time.Duration {
	if len(ds) == 0 {
		return fallback
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
