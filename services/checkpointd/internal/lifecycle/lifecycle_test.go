package lifecycle

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"
	clocktesting "k8s.io/utils/clock/testing"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/checkpointd/internal/materialize"
	"nodeconfig.io/services/checkpointd/internal/store"
)

type fixture struct {
	node   *Node
	store  *store.Store
	target materialize.Target
	dir    string
	// clk is the store's clock; tests move it past a soak.
	clk *clocktesting.FakeClock
}

func (f *fixture) clock() time.Time { return f.clk.Now() }

func (f *fixture) advance(d time.Duration) { f.clk.Step(d) }

// promote waits out the active config's soak on the fixture's clock and
// promotes it.
func (f *fixture) promote(t *testing.T, rv string) {
	t.Helper()
	f.advance(time.Duration(f.records(t).GetAssigned().GetSoakSeconds()) * time.Second)
	if _, err := f.node.Promote(src(rv)); err != nil {
		t.Fatal(err)
	}
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{dir: dir, clk: clocktesting.NewFakeClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))}
	st, err := store.Open(filepath.Join(dir, "c.db"), store.Options{NoSync: true, Now: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f.store, f.target = st, materialize.Target{Dir: filepath.Join(dir, "target"), Name: "config.yaml"}
	f.node = New(Options{Store: st, Target: f.target})
	return f
}

var ctx = context.Background()

func src(rv string) *nodeconfigv1.ConfigSource {
	return &nodeconfigv1.ConfigSource{Namespace: "ns", Name: "cm", Uid: "uid-1", ResourceVersion: rv, Key: "config.yaml"}
}

// assignment is version rv, judged as YAML and soaked soakSeconds.
func assignment(rv string, soakSeconds int64) Assignment {
	return Assignment{Source: src(rv), SoakSeconds: soakSeconds, Validator: nodeconfigv1.Validator_VALIDATOR_YAML}
}

func (f *fixture) put(t *testing.T, rv, content string) {
	t.Helper()
	if _, _, err := f.node.PutCheckpoint(src(rv), map[string]string{"config.yaml": content}); err != nil {
		t.Fatal(err)
	}
}

// assign puts, assigns and activates one version, returning the outcome.
func (f *fixture) assign(t *testing.T, rv, content string) nodeconfigv1.ActivateOutcome {
	t.Helper()
	f.put(t, rv, content)
	if _, err := f.node.Assign(assignment(rv, 60)); err != nil {
		t.Fatal(err)
	}
	outcome, _, err := f.node.Activate()
	if err != nil {
		t.Fatal(err)
	}
	return outcome
}

func (f *fixture) records(t *testing.T) *nodeconfigv1.Records {
	t.Helper()
	recs, err := f.node.Records()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func (f *fixture) targetContent(t *testing.T) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(f.target.Path())
	if os.IsNotExist(err) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b), true
}

// wantErr checks that err is kind (internal/grpcapi maps each kind to its
// status code) and says contains.
func wantErr(t *testing.T, err, kind error, contains string) {
	t.Helper()
	if !errors.Is(err, kind) || !strings.Contains(err.Error(), contains) {
		t.Fatalf("err = %v, want %v containing %q", err, kind, contains)
	}
}

// wantWriteFailed checks that err is a recorded write failure, of a full
// disk (ResourceExhausted over gRPC) or not (FailedPrecondition), that
// says contains.
func wantWriteFailed(t *testing.T, err error, noSpace bool, contains string) {
	t.Helper()
	var wf *WriteFailedError
	if !errors.As(err, &wf) || wf.NoSpace() != noSpace || !strings.Contains(err.Error(), contains) {
		t.Fatalf("err = %v, want a write failure (no space: %v) containing %q", err, noSpace, contains)
	}
}

func TestActivateWritesTargetThenRecordsActive(t *testing.T) {
	f := newFixture(t)
	if got := f.assign(t, "1", "a: 1\n"); got != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED {
		t.Fatalf("outcome %v", got)
	}
	recs := f.records(t)
	if !records.SameSource(recs.GetActive().GetSource(), src("1")) || recs.GetError() != nil {
		t.Fatalf("records after activation: %v", recs)
	}
	if got, ok := f.targetContent(t); !ok || got != "a: 1\n" {
		t.Fatalf("target = %q, %v", got, ok)
	}
}

func TestLateErrorRollsBackToLastKnownGoodAndRecordsError(t *testing.T) {
	f := newFixture(t)
	f.assign(t, "1", "a: 1\n")
	f.promote(t, "1")
	if got := f.assign(t, "2", "a: [1\n"); got != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ROLLED_BACK {
		t.Fatalf("outcome %v, want ROLLED_BACK", got)
	}
	recs := f.records(t)
	if !records.SameSource(recs.GetActive().GetSource(), src("1")) {
		t.Fatalf("active = %v, want last-known-good", recs.GetActive())
	}
	e := recs.GetError().GetError()
	if e.GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE || e.GetReason() != "ValidationFailed" || !strings.Contains(e.GetMessage(), "line") {
		t.Fatalf("error = %v, want a late ValidationFailed naming the line", e)
	}
	if got, _ := f.targetContent(t); got != "a: 1\n" {
		t.Fatalf("target = %q, want the last-known-good payload", got)
	}
	_, err := f.node.Promote(src("2"))
	wantErr(t, err, ErrRefused, "not active")
	// A good new assignment clears the error.
	f.assign(t, "3", "a: 3\n")
	if recs := f.records(t); recs.GetError() != nil {
		t.Fatalf("error not cleared by a successful activation: %v", recs.GetError())
	}
}

func TestLateErrorWithoutLastKnownGoodRemovesTarget(t *testing.T) {
	f := newFixture(t)
	if got := f.assign(t, "1", "{"); got != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ROLLED_BACK {
		t.Fatalf("outcome %v", got)
	}
	if _, ok := f.targetContent(t); ok {
		t.Fatal("target exists; the local default means no file")
	}
	if recs := f.records(t); recs.GetActive() != nil {
		t.Fatalf("active = %v, want nil (local default)", recs.GetActive())
	}
}

func TestResetClearsEverythingAndRemovesTarget(t *testing.T) {
	f := newFixture(t)
	f.assign(t, "1", "a: 1\n")
	f.promote(t, "1")
	r, err := f.node.Reset(30, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.GetAssigned() != nil || r.GetActive() != nil || r.GetLastKnownGood() != nil || r.GetError() != nil {
		t.Fatalf("records after reset: %v", r)
	}
	// The reset itself is on record, durably, to pace the next departures.
	stored, err := f.store.Records()
	if err != nil {
		t.Fatal(err)
	}
	if lr := stored.GetLastReset(); lr.GetFrom().GetResourceVersion() != "1" || lr.GetSoakSeconds() != 30 || lr.GetAt() == nil {
		t.Fatalf("stored reset record %v; want from version 1, soak 30, a time", lr)
	}
	if _, ok := f.targetContent(t); ok {
		t.Fatal("target still exists after reset")
	}
	// The next assignment starts a new story: the reset record goes.
	f.assign(t, "2", "a: 2\n")
	if stored, err = f.store.Records(); err != nil || stored.GetLastReset() != nil {
		t.Fatalf("after a new assignment the reset record is %v (err %v); want none", stored.GetLastReset(), err)
	}
}

func TestRecoverRepairsDriftAndFinishesInterruptedActivation(t *testing.T) {
	f := newFixture(t)
	f.assign(t, "1", "a: 1\n")
	if err := os.WriteFile(f.target.Path(), []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := f.node.Recover(); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.targetContent(t); got != "a: 1\n" {
		t.Fatalf("drift not repaired: %q", got)
	}
	// A crash between Assign and Activate: start finishes the activation.
	f.put(t, "2", "a: 2\n")
	if _, err := f.node.Assign(assignment("2", DefaultSoakSeconds)); err != nil {
		t.Fatal(err)
	}
	if err := f.node.Recover(); err != nil {
		t.Fatal(err)
	}
	if recs := f.records(t); !records.SameSource(recs.GetActive().GetSource(), src("2")) {
		t.Fatalf("active after recover = %v, want the assigned config", recs.GetActive())
	}
	repaired, err := f.node.RepairDrift()
	if err != nil || repaired {
		t.Fatalf("no drift expected: %v %v", repaired, err)
	}
}

// The node refuses to promote before the soak ends, whoever asks: the soak
// runs from when the config became active.
func TestPromoteRefusedBeforeTheSoakEnds(t *testing.T) {
	f := newFixture(t)
	f.assign(t, "1", "a: 1\n")
	f.advance(59 * time.Second)
	_, err := f.node.Promote(src("1"))
	wantErr(t, err, ErrRefused, "soaking until")
	if recs := f.records(t); recs.GetLastKnownGood() != nil {
		t.Fatalf("promoted before the soak ended: %v", recs.GetLastKnownGood())
	}
	f.advance(time.Second)
	if _, err := f.node.Promote(src("1")); err != nil {
		t.Fatalf("at the soak's end: %v", err)
	}
}

// A target that cannot be written is an early error recorded on the node,
// with nothing rolled back; the next successful activation clears it.
func TestActivateWriteFailureIsAnEarlyErrorNotARollback(t *testing.T) {
	f := newFixture(t)
	f.assign(t, "1", "a: 1\n")
	f.promote(t, "1")
	// A file where the directory's temp file would go: every write fails.
	blocked := materialize.Target{Dir: f.target.Path(), Name: "x"}
	f.node.target = blocked
	f.put(t, "2", "a: 2\n")
	if _, err := f.node.Assign(assignment("2", 60)); err != nil {
		t.Fatal(err)
	}
	_, _, err := f.node.Activate()
	wantWriteFailed(t, err, false, "cannot write")
	recs := f.records(t)
	if e := recs.GetError().GetError(); e.GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY || e.GetReason() != records.ReasonWriteFailed {
		t.Fatalf("error %v, want an early %s", e, records.ReasonWriteFailed)
	}
	if !records.SameSource(recs.GetActive().GetSource(), src("1")) || !records.SameSource(recs.GetLastKnownGood().GetSource(), src("1")) {
		t.Fatalf("records moved on a write failure: %v", recs)
	}
	f.node.target = f.target
	f.advance(time.Minute)
	outcome, recs, err := f.node.Activate()
	if err != nil || outcome != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED {
		t.Fatalf("activate once writable: %v %v", outcome, err)
	}
	if recs.GetError() != nil || !recs.GetActive().GetWrittenAt().AsTime().Equal(f.clock()) {
		t.Fatalf("after the retry: %v; want no error and active written now (%v)", recs, f.clock())
	}
}

// fullDisk mounts a small tmpfs at dir and fills it, so that creating any
// file there fails with ENOSPC while reads and removals work, as on a real
// full disk; the returned func frees the space. The test's cleanup
// unmounts. Root ignores permission bits, hence a real filesystem.
func fullDisk(t *testing.T, dir string) (free func()) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		if errors.Is(err, syscall.EPERM) {
			t.Skipf("mounting a tmpfs needs CAP_SYS_ADMIN: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	filler := filepath.Join(dir, ".filler")
	fh, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := fh.Write(make([]byte, 4096)); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	_ = fh.Close()
	return func() {
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
	}
}

// A drift repair that cannot write (the file was removed and the disk is
// full) is an early error: nothing rolls back — active and last-known-good
// stay — and the file is restored once there is room again.
func TestDriftRepairOnAFullDiskIsAnEarlyErrorAndRestoresTheFileLater(t *testing.T) {
	f := newFixture(t)
	f.assign(t, "1", "a: 1\n")
	f.promote(t, "1")
	before := f.records(t)
	// The full tmpfs mounted over the directory also hides the file.
	free := fullDisk(t, f.target.Dir)
	_, err := f.node.RepairDrift()
	wantWriteFailed(t, err, true, "no space left on device")
	recs := f.records(t)
	if e := recs.GetError().GetError(); e.GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY || e.GetReason() != records.ReasonWriteFailed {
		t.Fatalf("error %v, want an early %s", e, records.ReasonWriteFailed)
	}
	if !proto.Equal(recs.GetActive(), before.GetActive()) || !proto.Equal(recs.GetLastKnownGood(), before.GetLastKnownGood()) {
		t.Fatalf("a failed write moved the records:\nbefore %v\nafter  %v", before, recs)
	}
	// A restart meanwhile serves and reports rather than failing or rolling back.
	if err := f.node.Recover(); err != nil {
		t.Fatalf("Recover on a full disk: %v", err)
	}
	if recs := f.records(t); !proto.Equal(recs.GetActive(), before.GetActive()) {
		t.Fatalf("Recover on a full disk moved active: %v", recs.GetActive())
	}
	free()
	repaired, err := f.node.RepairDrift()
	if err != nil || !repaired {
		t.Fatalf("repair once there is room: %v %v", repaired, err)
	}
	if got, ok := f.targetContent(t); !ok || got != "a: 1\n" {
		t.Fatalf("target = %q (exists %v), want the active payload back", got, ok)
	}
	if recs := f.records(t); recs.GetError() != nil || !proto.Equal(recs.GetActive(), before.GetActive()) {
		t.Fatalf("after the repair: %v; want the error cleared and active unchanged", recs)
	}
}

// A checkpoint deleted while Assign runs — after it takes the lock and
// before its records change — is either seen by the assignment (refused)
// or refused itself: assigned never names a payload that is gone.
func TestAssignNeverNamesAPayloadDeletedConcurrently(t *testing.T) {
	f := newFixture(t)
	f.put(t, "1", "a: 1\n")
	var deleteErr error
	f.node.testHookBeforeAssign = func() {
		deleteErr = f.node.DeleteCheckpoint("uid-1", "1")
	}
	_, err := f.node.Assign(assignment("1", 60))
	if deleteErr != nil {
		t.Fatalf("setup: the concurrent delete failed: %v", deleteErr)
	}
	wantErr(t, err, ErrRefused, "no checkpoint")
	if a := f.records(t).GetAssigned(); a != nil {
		t.Fatalf("assigned %v names a payload that is gone", a)
	}
}

// Reset stopped between its two steps (here: the file cannot be removed,
// as a crash right there) never brings the old config back at the next
// start: the records say "local default" first, and the start's repair
// removes the file.
func TestResetInterruptedBeforeTheFileGoesDoesNotBringTheConfigBack(t *testing.T) {
	f := newFixture(t)
	f.assign(t, "1", "a: 1\n")
	f.promote(t, "1")
	undo := blockDir(t, f.target.Dir)
	if _, err := f.node.Reset(0, ""); err == nil {
		t.Fatal("Reset succeeded while the target directory was a regular file")
	}
	undo()
	// The next start.
	restarted := New(Options{Store: f.store, Target: f.target})
	if err := restarted.Recover(); err != nil {
		t.Fatal(err)
	}
	if r := f.records(t); r.GetAssigned() != nil || r.GetActive() != nil || r.GetLastKnownGood() != nil {
		t.Fatalf("records after the interrupted reset and a start: %v, want the local default", r)
	}
	if got, ok := f.targetContent(t); ok {
		t.Fatalf("the old config came back at start: target = %q", got)
	}
}

// blockDir makes dir's files impossible to remove until the returned undo
// (which the test's cleanup also runs): the directory is moved aside and a
// regular file takes its name, so removing dir/<name> fails with ENOTDIR.
// Unlike permission bits, this stops root too, and needs no mount.
func blockDir(t *testing.T, dir string) (undo func()) {
	t.Helper()
	aside := dir + ".aside"
	if err := os.Rename(dir, aside); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	blocked := true
	undo = func() {
		if !blocked {
			return
		}
		blocked = false
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove the file in place of %s: %v", dir, err)
		}
		if err := os.Rename(aside, dir); err != nil {
			t.Errorf("put %s back: %v", dir, err)
		}
	}
	t.Cleanup(undo)
	return undo
}

// Every sweep counts in nodeconfig_checkpoint_sweeps_total, also one that
// removed nothing: a test can tell the GC timer fired.
func TestRunGCCountsEverySweep(t *testing.T) {
	f := newFixture(t)
	f.put(t, "1", "a: 1\n")
	gctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); f.node.RunGC(gctx, time.Millisecond, time.Hour) }()
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(f.node.metrics.sweeps) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%v sweeps counted in 10 s at a 1 ms interval", testutil.ToFloat64(f.node.metrics.sweeps))
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if ps, err := f.store.ListPayloads(); err != nil || len(ps) != 1 {
		t.Fatalf("sweeps within the min age removed a checkpoint: %d left, %v", len(ps), err)
	}
}
