package grpcapi

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/checkpointd/internal/lifecycle"
	"nodeconfig.io/services/checkpointd/internal/materialize"
	"nodeconfig.io/services/checkpointd/internal/store"
)

// fixture serves one node whose store and target file are in a temporary
// directory.
type fixture struct{ svc *Service }

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	return &fixture{svc: serve(t, dir, materialize.Target{Dir: filepath.Join(dir, "target"), Name: "config.yaml"})}
}

func serve(t *testing.T, dir string, target materialize.Target) *Service {
	t.Helper()
	st, err := store.Open(filepath.Join(dir, "c.db"), store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return New(lifecycle.New(lifecycle.Options{Store: st, Target: target}))
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

// assign puts, assigns and activates one version.
func (f *fixture) assign(t *testing.T, rv, content string) {
	t.Helper()
	f.put(t, rv, content)
	if _, err := f.svc.SetAssigned(ctx, &nodeconfigv1.SetAssignedRequest{Source: src(rv), SoakSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Activate(ctx, &nodeconfigv1.ActivateRequest{}); err != nil {
		t.Fatal(err)
	}
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
	if a := first.GetRecords().GetAssigned(); a.GetSoakSeconds() != lifecycle.DefaultSoakSeconds || a.GetValidator() != nodeconfigv1.Validator_VALIDATOR_YAML {
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

func TestResetRefusesANegativeSoak(t *testing.T) {
	f := newFixture(t)
	_, err := f.svc.Reset(ctx, &nodeconfigv1.ResetRequest{SoakSeconds: -1})
	wantCode(t, err, codes.InvalidArgument, "negative")
}

// A promotion the records do not allow is FailedPrecondition.
func TestPromoteRefusalIsFailedPrecondition(t *testing.T) {
	f := newFixture(t)
	f.assign(t, "1", "a: 1\n")
	_, err := f.svc.PromoteLastKnownGood(ctx, &nodeconfigv1.PromoteLastKnownGoodRequest{Source: src("1")})
	wantCode(t, err, codes.FailedPrecondition, "soaking until")
	f.put(t, "2", "a: 2\n")
	if _, err := f.svc.SetAssigned(ctx, &nodeconfigv1.SetAssignedRequest{Source: src("2"), SoakSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	_, err = f.svc.PromoteLastKnownGood(ctx, &nodeconfigv1.PromoteLastKnownGoodRequest{Source: src("2")})
	wantCode(t, err, codes.FailedPrecondition, "not active")
}

// A target file that cannot be written fails the call with
// FailedPrecondition: the caller retries, nothing is unavailable.
func TestActivateWriteFailureIsFailedPrecondition(t *testing.T) {
	dir := t.TempDir()
	// A file where the directory's temp file would go: every write fails.
	blocked := filepath.Join(dir, "blocked")
	if err := os.WriteFile(blocked, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f := &fixture{svc: serve(t, dir, materialize.Target{Dir: blocked, Name: "x"})}
	f.put(t, "1", "a: 1\n")
	if _, err := f.svc.SetAssigned(ctx, &nodeconfigv1.SetAssignedRequest{Source: src("1"), SoakSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	_, err := f.svc.Activate(ctx, &nodeconfigv1.ActivateRequest{})
	wantCode(t, err, codes.FailedPrecondition, "cannot write")
}

// Each error of the lifecycle and the store has the code the API promises.
func TestErrorsMapToTheirCodes(t *testing.T) {
	cases := map[string]struct {
		err  error
		code codes.Code
		msg  string
	}{
		"write failed": {&lifecycle.WriteFailedError{Message: "cannot write x", Err: syscall.EROFS}, codes.FailedPrecondition,
			"cannot write x (recorded as an early error WriteFailed; retry)"},
		"disk full": {&lifecycle.WriteFailedError{Message: "cannot write x", Err: syscall.ENOSPC}, codes.ResourceExhausted,
			"cannot write x (recorded as an early error WriteFailed; retry)"},
		"target":       {&lifecycle.TargetError{Err: store.ErrNotFound}, codes.Internal, "checkpoint not found"},
		"watchers":     {lifecycle.ErrTooManyWatchers, codes.ResourceExhausted, "too many watchers; retry later"},
		"not found":    {store.ErrNotFound, codes.NotFound, "checkpoint not found"},
		"conflict":     {store.ErrConflict, codes.AlreadyExists, store.ErrConflict.Error() + "; a ConfigMap version never changes content, so this is a bug in the caller"},
		"referenced":   {store.ErrReferenced, codes.FailedPrecondition, "checkpoint is referenced by a record"},
		"store broken": {store.ErrCorrupt, codes.Internal, "store: store file is corrupt"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			st := status.Convert(grpcError(tc.err))
			if st.Code() != tc.code || st.Message() != tc.msg {
				t.Fatalf("%v: %v %q, want %v %q", tc.err, st.Code(), st.Message(), tc.code, tc.msg)
			}
		})
	}
}

// watchStream is the server side of one WatchRecords call, in memory.
type watchStream struct {
	grpc.ServerStream
	ctx  context.Context
	sent int
}

func (s *watchStream) Context() context.Context { return s.ctx }
func (s *watchStream) Send(*nodeconfigv1.WatchRecordsResponse) error {
	s.sent++
	return nil
}

// A watch the caller bounds with a deadline ends with DeadlineExceeded, as
// the caller's own side says, never with a clean end of the stream.
func TestWatchRecordsEndsWithTheCallersDeadline(t *testing.T) {
	f := newFixture(t)
	deadline, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	stream := &watchStream{ctx: deadline}
	err := f.svc.WatchRecords(&nodeconfigv1.WatchRecordsRequest{}, stream)
	wantCode(t, err, codes.DeadlineExceeded, "")
	if stream.sent != 1 {
		t.Fatalf("%d records sent before the deadline, want the current ones once", stream.sent)
	}
	canceled, cancelNow := context.WithCancel(ctx)
	cancelNow()
	wantCode(t, f.svc.WatchRecords(&nodeconfigv1.WatchRecordsRequest{}, &watchStream{ctx: canceled}), codes.Canceled, "")
}
