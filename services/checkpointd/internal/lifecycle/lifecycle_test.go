package lifecycle

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/checkpointd/internal/materialize"
	"nodeconfig.io/services/checkpointd/internal/store"
)

type fixture struct {
	svc    *Service
	store  *store.Store
	target materialize.Target
	dir    string
	// now is the store's clock; tests move it past a soak.
	mu  sync.Mutex
	now time.Time
}

func (f *fixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

// promote waits out the active config's soak on the fixture's clock and
// promotes it.
func (f *fixture) promote(t *testing.T, rv string) {
	t.Helper()
	f.advance(time.Duration(f.records(t).GetAssigned().GetSoakSeconds()) * time.Second)
	if _, err := f.svc.PromoteLastKnownGood(ctx, &nodeconfigv1.PromoteLastKnownGoodRequest{Source: src(rv)}); err != nil {
		t.Fatal(err)
	}
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{dir: dir, now: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	st, err := store.Open(filepath.Join(dir, "c.db"), store.Options{NoSync: true, Now: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f.store, f.target = st, materialize.Target{Dir: filepath.Join(dir, "target"), Name: "config.yaml"}
	f.svc = New(Options{Store: st, Target: f.target})
	return f
}

var ctx = context.Background()

func src(rv string) *nodeconfigv1.ConfigSource {
	return &nodeconfigv1.ConfigSource{Namespace: "ns", Name: "cm", Uid: "uid-1", ResourceVersion: rv, Key: "config.yaml"}
}

func (f *fixture) put(t *testing.T, rv, content string) {
	t.Helper()
	if _, err := f.svc.PutCheckpoint(ctx, &nodeconfigv1.PutCheckpointRequest{Source: src(rv), Data: map[string]string{"config.yaml": content}}); err != nil {
		t.Fatal(err)
	}
}

// assign puts, assigns and activates one version, returning the outcome.
func (f *fixture) assign(t *testing.T, rv, content string) nodeconfigv1.ActivateOutcome {
	t.Helper()
	f.put(t, rv, content)
	if _, err := f.svc.SetAssigned(ctx, &nodeconfigv1.SetAssignedRequest{Source: src(rv), SoakSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	resp, err := f.svc.Activate(ctx, &nodeconfigv1.ActivateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetOutcome()
}

func (f *fixture) records(t *testing.T) *nodeconfigv1.Records {
	t.Helper()
	resp, err := f.svc.GetRecords(ctx, &nodeconfigv1.GetRecordsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetRecords()
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

func wantCode(t *testing.T, err error, code codes.Code, contains string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), contains) {
		t.Fatalf("err = %v, want %v containing %q", err, code, contains)
	}
}

func TestPutCheckpointRejectsBadInput(t *testing.T) {
	f := newFixture(t)
	big := strings.Repeat("x", 1<<20+1)
	cases := map[string]struct {
		req      *nodeconfigv1.PutCheckpointRequest
		contains string
	}{
		"no source":         {&nodeconfigv1.PutCheckpointRequest{Data: map[string]string{"a": "b"}}, "source is required"},
		"empty uid":         {&nodeconfigv1.PutCheckpointRequest{Source: &nodeconfigv1.ConfigSource{ResourceVersion: "1"}, Data: map[string]string{"a": "b"}}, "empty UID is ambiguous"},
		"empty rv":          {&nodeconfigv1.PutCheckpointRequest{Source: &nodeconfigv1.ConfigSource{Uid: "u"}, Data: map[string]string{"a": "b"}}, "resource_version is empty"},
		"slash in uid":      {&nodeconfigv1.PutCheckpointRequest{Source: &nodeconfigv1.ConfigSource{Uid: "a/b", ResourceVersion: "1"}, Data: map[string]string{"a": "b"}}, "without '/'"},
		"path separator":    {&nodeconfigv1.PutCheckpointRequest{Source: src("1"), Data: map[string]string{"config.yaml": "x", "../etc/passwd": "x"}}, "not a valid ConfigMap key"},
		"dot dot":           {&nodeconfigv1.PutCheckpointRequest{Source: src("1"), Data: map[string]string{"config.yaml": "x", "..": "x"}}, "not a valid ConfigMap key"},
		"long key":          {&nodeconfigv1.PutCheckpointRequest{Source: src("1"), Data: map[string]string{"config.yaml": "x", strings.Repeat("k", 254): "x"}}, "not a valid ConfigMap key"},
		"over 1 MiB":        {&nodeconfigv1.PutCheckpointRequest{Source: src("1"), Data: map[string]string{"config.yaml": big}}, "1 MiB"},
		"named key missing": {&nodeconfigv1.PutCheckpointRequest{Source: src("1"), Data: map[string]string{"other": "x"}}, `no key "config.yaml"`},
		"no data":           {&nodeconfigv1.PutCheckpointRequest{Source: src("1")}, "data is empty"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := f.svc.PutCheckpoint(ctx, tc.req)
			wantCode(t, err, codes.InvalidArgument, tc.contains)
		})
	}
	list, _ := f.svc.ListCheckpoints(ctx, &nodeconfigv1.ListCheckpointsRequest{})
	if len(list.GetCheckpoints()) != 0 {
		t.Fatalf("bad input stored something: %v", list.GetCheckpoints())
	}
}

func TestPutCheckpointSameVersionOtherContentIsAlreadyExists(t *testing.T) {
	f := newFixture(t)
	f.put(t, "1", "a: 1\n")
	resp, err := f.svc.PutCheckpoint(ctx, &nodeconfigv1.PutCheckpointRequest{Source: src("1"), Data: map[string]string{"config.yaml": "a: 1\n"}})
	if err != nil || resp.GetCreated() {
		t.Fatalf("same content: created=%v err=%v", resp.GetCreated(), err)
	}
	_, err = f.svc.PutCheckpoint(ctx, &nodeconfigv1.PutCheckpointRequest{Source: src("1"), Data: map[string]string{"config.yaml": "a: 2\n"}})
	wantCode(t, err, codes.AlreadyExists, "different payload")
}

func TestSetAssignedNeedsCheckpointAndKeepsSoakClockOnRepeat(t *testing.T) {
	f := newFixture(t)
	_, err := f.svc.SetAssigned(ctx, &nodeconfigv1.SetAssignedRequest{Source: src("1")})
	wantCode(t, err, codes.FailedPrecondition, "PutCheckpoint first")
	f.put(t, "1", "a: 1\n")
	other := src("1")
	other.Key = "missing"
	_, err = f.svc.SetAssigned(ctx, &nodeconfigv1.SetAssignedRequest{Source: other})
	wantCode(t, err, codes.FailedPrecondition, "no key")
	_, err = f.svc.SetAssigned(ctx, &nodeconfigv1.SetAssignedRequest{Source: src("1"), SoakSeconds: -1})
	wantCode(t, err, codes.InvalidArgument, "soak_seconds")

	first, err := f.svc.SetAssigned(ctx, &nodeconfigv1.SetAssignedRequest{Source: src("1")})
	if err != nil {
		t.Fatal(err)
	}
	if a := first.GetRecords().GetAssigned(); a.GetSoakSeconds() != DefaultSoakSeconds || a.GetValidator() != nodeconfigv1.Validator_VALIDATOR_YAML {
		t.Fatalf("defaults not applied: %v", a)
	}
	again, err := f.svc.SetAssigned(ctx, &nodeconfigv1.SetAssignedRequest{Source: src("1")})
	if err != nil {
		t.Fatal(err)
	}
	if !again.GetRecords().GetAssigned().GetWrittenAt().AsTime().Equal(first.GetRecords().GetAssigned().GetWrittenAt().AsTime()) ||
		again.GetRecords().GetRevision() != first.GetRecords().GetRevision() {
		t.Fatal("assigning the same config again rewrote the record (and would reset the soak clock)")
	}
}

func TestActivateWritesTargetThenRecordsActive(t *testing.T) {
	f := newFixture(t)
	if got := f.assign(t, "1", "a: 1\n"); got != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED {
		t.Fatalf("outcome %v", got)
	}
	recs := f.records(t)
	if !nodeconfigv1.SameSource(recs.GetActive().GetSource(), src("1")) || recs.GetError() != nil {
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
	if !nodeconfigv1.SameSource(recs.GetActive().GetSource(), src("1")) {
		t.Fatalf("active = %v, want last-known-good", recs.GetActive())
	}
	e := recs.GetError().GetError()
	if e.GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE || e.GetReason() != "ValidationFailed" || !strings.Contains(e.GetMessage(), "line") {
		t.Fatalf("error = %v, want a late ValidationFailed naming the line", e)
	}
	if got, _ := f.targetContent(t); got != "a: 1\n" {
		t.Fatalf("target = %q, want the last-known-good payload", got)
	}
	_, err := f.svc.PromoteLastKnownGood(ctx, &nodeconfigv1.PromoteLastKnownGoodRequest{Source: src("2")})
	wantCode(t, err, codes.FailedPrecondition, "not active")
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

func TestSetErrorAcceptsOnlyEarlyErrors(t *testing.T) {
	f := newFixture(t)
	_, err := f.svc.SetError(ctx, &nodeconfigv1.SetErrorRequest{Error: &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE, Reason: "X", Message: "m"}})
	wantCode(t, err, codes.InvalidArgument, "only early errors")
	_, err = f.svc.SetError(ctx, &nodeconfigv1.SetErrorRequest{Error: &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY, Reason: "not camel", Message: "m"}})
	wantCode(t, err, codes.InvalidArgument, "CamelCase")
	resp, err := f.svc.SetError(ctx, &nodeconfigv1.SetErrorRequest{Error: &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY, Reason: "DownloadFailed", Message: "no ConfigMap"}})
	if err != nil || resp.GetRecords().GetError().GetError().GetReason() != "DownloadFailed" {
		t.Fatalf("%v %v", resp, err)
	}
	resp, err = f.svc.SetError(ctx, &nodeconfigv1.SetErrorRequest{})
	if err != nil || resp.GetRecords().GetError() != nil {
		t.Fatalf("clear: %v %v", resp, err)
	}
}

func TestResetClearsEverythingAndRemovesTarget(t *testing.T) {
	f := newFixture(t)
	f.assign(t, "1", "a: 1\n")
	f.promote(t, "1")
	_, err := f.svc.Reset(ctx, &nodeconfigv1.ResetRequest{SoakSeconds: -1})
	wantCode(t, err, codes.InvalidArgument, "negative")
	resp, err := f.svc.Reset(ctx, &nodeconfigv1.ResetRequest{SoakSeconds: 30})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.GetRecords()
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

func TestDeleteCheckpointRefusesReferenced(t *testing.T) {
	f := newFixture(t)
	f.assign(t, "1", "a: 1\n")
	_, err := f.svc.DeleteCheckpoint(ctx, &nodeconfigv1.DeleteCheckpointRequest{Uid: "uid-1", ResourceVersion: "1"})
	wantCode(t, err, codes.FailedPrecondition, "referenced")
	f.put(t, "2", "a: 2\n")
	if _, err := f.svc.DeleteCheckpoint(ctx, &nodeconfigv1.DeleteCheckpointRequest{Uid: "uid-1", ResourceVersion: "2"}); err != nil {
		t.Fatal(err)
	}
	_, err = f.svc.GetCheckpoint(ctx, &nodeconfigv1.GetCheckpointRequest{Uid: "uid-1", ResourceVersion: "2"})
	wantCode(t, err, codes.NotFound, "not found")
}

func TestRecoverRepairsDriftAndFinishesInterruptedActivation(t *testing.T) {
	f := newFixture(t)
	f.assign(t, "1", "a: 1\n")
	if err := os.WriteFile(f.target.Path(), []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.Recover(); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.targetContent(t); got != "a: 1\n" {
		t.Fatalf("drift not repaired: %q", got)
	}
	// A crash between SetAssigned and Activate: start finishes the activation.
	f.put(t, "2", "a: 2\n")
	if _, err := f.svc.SetAssigned(ctx, &nodeconfigv1.SetAssignedRequest{Source: src("2")}); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.Recover(); err != nil {
		t.Fatal(err)
	}
	if recs := f.records(t); !nodeconfigv1.SameSource(recs.GetActive().GetSource(), src("2")) {
		t.Fatalf("active after recover = %v, want the assigned config", recs.GetActive())
	}
	resp, err := f.svc.RepairDrift(ctx, &nodeconfigv1.RepairDriftRequest{})
	if err != nil || resp.GetRepaired() {
		t.Fatalf("no drift expected: %v %v", resp, err)
	}
}

// The node refuses to promote before the soak ends, whoever asks: the soak
// runs from when the config became active.
func TestPromoteRefusedBeforeTheSoakEnds(t *testing.T) {
	f := newFixture(t)
	f.assign(t, "1", "a: 1\n")
	f.advance(59 * time.Second)
	_, err := f.svc.PromoteLastKnownGood(ctx, &nodeconfigv1.PromoteLastKnownGoodRequest{Source: src("1")})
	wantCode(t, err, codes.FailedPrecondition, "soaking until")
	if recs := f.records(t); recs.GetLastKnownGood() != nil {
		t.Fatalf("promoted before the soak ended: %v", recs.GetLastKnownGood())
	}
	f.advance(time.Second)
	if _, err := f.svc.PromoteLastKnownGood(ctx, &nodeconfigv1.PromoteLastKnownGoodRequest{Source: src("1")}); err != nil {
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
	f.svc.target = blocked
	f.put(t, "2", "a: 2\n")
	if _, err := f.svc.SetAssigned(ctx, &nodeconfigv1.SetAssignedRequest{Source: src("2"), SoakSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	_, err := f.svc.Activate(ctx, &nodeconfigv1.ActivateRequest{})
	wantCode(t, err, codes.FailedPrecondition, "cannot write")
	recs := f.records(t)
	if e := recs.GetError().GetError(); e.GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY || e.GetReason() != ReasonWriteFailed {
		t.Fatalf("error %v, want an early %s", e, ReasonWriteFailed)
	}
	if !nodeconfigv1.SameSource(recs.GetActive().GetSource(), src("1")) || !nodeconfigv1.SameSource(recs.GetLastKnownGood().GetSource(), src("1")) {
		t.Fatalf("records moved on a write failure: %v", recs)
	}
	f.svc.target = f.target
	f.advance(time.Minute)
	resp, err := f.svc.Activate(ctx, &nodeconfigv1.ActivateRequest{})
	if err != nil || resp.GetOutcome() != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED {
		t.Fatalf("activate once writable: %v %v", resp, err)
	}
	recs = resp.GetRecords()
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
	_, err := f.svc.RepairDrift(ctx, &nodeconfigv1.RepairDriftRequest{})
	wantCode(t, err, codes.ResourceExhausted, "no space left on device")
	recs := f.records(t)
	if e := recs.GetError().GetError(); e.GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY || e.GetReason() != ReasonWriteFailed {
		t.Fatalf("error %v, want an early %s", e, ReasonWriteFailed)
	}
	if !proto.Equal(recs.GetActive(), before.GetActive()) || !proto.Equal(recs.GetLastKnownGood(), before.GetLastKnownGood()) {
		t.Fatalf("a failed write moved the records:\nbefore %v\nafter  %v", before, recs)
	}
	// A restart meanwhile serves and reports rather than failing or rolling back.
	if err := f.svc.Recover(); err != nil {
		t.Fatalf("Recover on a full disk: %v", err)
	}
	if recs := f.records(t); !proto.Equal(recs.GetActive(), before.GetActive()) {
		t.Fatalf("Recover on a full disk moved active: %v", recs.GetActive())
	}
	free()
	resp, err := f.svc.RepairDrift(ctx, &nodeconfigv1.RepairDriftRequest{})
	if err != nil || !resp.GetRepaired() {
		t.Fatalf("repair once there is room: %v %v", resp, err)
	}
	if got, ok := f.targetContent(t); !ok || got != "a: 1\n" {
		t.Fatalf("target = %q (exists %v), want the active payload back", got, ok)
	}
	if recs := f.records(t); recs.GetError() != nil || !proto.Equal(recs.GetActive(), before.GetActive()) {
		t.Fatalf("after the repair: %v; want the error cleared and active unchanged", recs)
	}
}

// A checkpoint deleted while SetAssigned runs — at the moment between its
// request checks and its records change, where the existence check used
// to be done — is either seen by the assignment (refused) or refused
// itself: assigned never names a payload that is gone.
func TestSetAssignedNeverNamesAPayloadDeletedConcurrently(t *testing.T) {
	f := newFixture(t)
	f.put(t, "1", "a: 1\n")
	var deleteErr error
	f.svc.testHookBeforeAssign = func() {
		_, deleteErr = f.svc.DeleteCheckpoint(ctx, &nodeconfigv1.DeleteCheckpointRequest{Uid: "uid-1", ResourceVersion: "1"})
	}
	_, err := f.svc.SetAssigned(ctx, &nodeconfigv1.SetAssignedRequest{Source: src("1"), SoakSeconds: 60})
	if deleteErr != nil {
		t.Fatalf("setup: the concurrent delete failed: %v", deleteErr)
	}
	wantCode(t, err, codes.FailedPrecondition, "no checkpoint")
	if a := f.records(t).GetAssigned(); a != nil {
		t.Fatalf("assigned %v names a payload that is gone", a)
	}
}

// readOnly bind-mounts dir read-only over itself until the returned undo
// (also run by the test's cleanup): unlink and create fail with EROFS,
// which root cannot bypass.
func readOnly(t *testing.T, dir string) (undo func()) {
	t.Helper()
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		if errors.Is(err, syscall.EPERM) {
			t.Skipf("a read-only bind mount needs CAP_SYS_ADMIN: %v", err)
		}
		t.Fatal(err)
	}
	mounted := true
	undo = func() {
		if mounted {
			mounted = false
			if err := syscall.Unmount(dir, 0); err != nil {
				t.Errorf("unmount %s: %v", dir, err)
			}
		}
	}
	t.Cleanup(undo)
	if err := syscall.Mount("", dir, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	return undo
}

// Reset stopped between its two steps (here: the file cannot be removed,
// as a crash right there) never brings the old config back at the next
// start: the records say "local default" first, and the start's repair
// removes the file.
func TestResetInterruptedBeforeTheFileGoesDoesNotBringTheConfigBack(t *testing.T) {
	f := newFixture(t)
	f.assign(t, "1", "a: 1\n")
	f.promote(t, "1")
	undo := readOnly(t, f.target.Dir)
	if _, err := f.svc.Reset(ctx, &nodeconfigv1.ResetRequest{}); err == nil {
		t.Fatal("Reset removed a file in a read-only directory")
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

// Every sweep counts in nodeconfig_checkpoint_sweeps_total, also one that
// removed nothing: a test can tell the GC timer fired.
func TestRunGCCountsEverySweep(t *testing.T) {
	f := newFixture(t)
	f.put(t, "1", "a: 1\n")
	gctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); f.svc.RunGC(gctx, time.Millisecond, time.Hour) }()
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(f.svc.metrics.sweeps) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%v sweeps counted in 10 s at a 1 ms interval", testutil.ToFloat64(f.svc.metrics.sweeps))
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if ps, err := f.store.ListPayloads(); err != nil || len(ps) != 1 {
		t.Fatalf("sweeps within the min age removed a checkpoint: %d left, %v", len(ps), err)
	}
}
