package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/types/known/timestamppb"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

func openTemp(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "checkpoints.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func payload(uid, rv string, data map[string]string) Payload {
	return Payload{Namespace: "ns", Name: "cm", UID: uid, ResourceVersion: rv, Data: data}
}

func TestPutPayloadIsIdempotentAndRefusesOtherContent(t *testing.T) {
	s := openTemp(t)
	p, created, err := s.PutPayload(payload("u1", "1", map[string]string{"k": "v"}))
	if err != nil || !created {
		t.Fatalf("first put: created=%v err=%v", created, err)
	}
	again, created, err := s.PutPayload(payload("u1", "1", map[string]string{"k": "v"}))
	if err != nil || created {
		t.Fatalf("same content again: created=%v err=%v", created, err)
	}
	if !again.StoredAt.Equal(p.StoredAt) || again.SHA256 != p.SHA256 {
		t.Fatalf("second put changed the stored payload: %+v vs %+v", again, p)
	}
	_, _, err = s.PutPayload(payload("u1", "1", map[string]string{"k": "other"}))
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("other content under the same uid/rv: err=%v, want ErrConflict", err)
	}
	got, err := s.GetPayload("u1", "1")
	if err != nil || got.Data["k"] != "v" {
		t.Fatalf("stored payload was overwritten: %+v %v", got, err)
	}
}

func TestDigestDistinguishesKeyValueBoundaries(t *testing.T) {
	a, _ := Digest(map[string]string{"ab": "c"})
	b, _ := Digest(map[string]string{"a": "bc"})
	if a == b {
		t.Fatal("different maps share a digest")
	}
}

func TestGetPayloadDetectsCorruptContent(t *testing.T) {
	s := openTemp(t)
	if _, _, err := s.PutPayload(payload("u1", "1", map[string]string{"k": "v"})); err != nil {
		t.Fatal(err)
	}
	// Change the content behind the digest's back.
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPayloads).Bucket(PayloadKey("u1", "1"))
		p, _, err := readPayload(b)
		if err != nil {
			return err
		}
		p.Data = map[string]string{"k": "x"}
		e, err := encodePayload(&p, false)
		if err != nil {
			return err
		}
		return b.Put(keyData, *e.cloned().block)
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetPayload("u1", "1"); !errors.Is(err, ErrChecksumFailed) {
		t.Fatalf("err = %v, want ErrChecksumFailed", err)
	}
}

func TestReferencedPayloadCannotBeDeletedAndSweepKeepsIt(t *testing.T) {
	now := time.Now()
	s, err := Open(filepath.Join(t.TempDir(), "c.db"), Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, rv := range []string{"1", "2", "3"} {
		if _, _, err := s.PutPayload(payload("u", rv, map[string]string{"k": rv})); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.UpdateRecords(func(r *nodeconfigv1.Records, ts *timestamppb.Timestamp) (bool, error) {
		r.LastKnownGood = &nodeconfigv1.SourceRecord{Source: &nodeconfigv1.ConfigSource{Uid: "u", ResourceVersion: "1", Key: "k"}, WrittenAt: ts}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePayload("u", "1"); !errors.Is(err, ErrReferenced) {
		t.Fatalf("delete of last-known-good: %v, want ErrReferenced", err)
	}
	if err := s.DeletePayload("u", "2"); err != nil {
		t.Fatalf("delete of unreferenced: %v", err)
	}
	if err := s.DeletePayload("u", "2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete twice: %v, want ErrNotFound", err)
	}
	// A young unreferenced payload survives the sweep (it may be about to be assigned).
	if n, err := s.SweepUnreferenced(time.Hour); err != nil || n != 0 {
		t.Fatalf("sweep removed %d young payloads (err %v)", n, err)
	}
	now = now.Add(2 * time.Hour)
	if n, err := s.SweepUnreferenced(time.Hour); err != nil || n != 1 {
		t.Fatalf("sweep removed %d, want 1 (err %v)", n, err)
	}
	if _, err := s.GetPayload("u", "1"); err != nil {
		t.Fatalf("sweep removed the referenced payload: %v", err)
	}
}

func TestUpdateRecordsWithoutChangeKeepsRevision(t *testing.T) {
	s := openTemp(t)
	recs, err := s.UpdateRecords(func(r *nodeconfigv1.Records, ts *timestamppb.Timestamp) (bool, error) {
		r.Error = &nodeconfigv1.ErrorRecord{Error: &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY, Reason: "X", Message: "m"}, WrittenAt: ts}
		return true, nil
	})
	if err != nil || recs.GetRevision() != 1 {
		t.Fatalf("revision %d err %v", recs.GetRevision(), err)
	}
	recs, err = s.UpdateRecords(func(*nodeconfigv1.Records, *timestamppb.Timestamp) (bool, error) { return false, nil })
	if err != nil || recs.GetRevision() != 1 {
		t.Fatalf("no-op update moved the revision to %d (err %v)", recs.GetRevision(), err)
	}
}

func TestRecordsSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := s.UpdateRecords(func(r *nodeconfigv1.Records, ts *timestamppb.Timestamp) (bool, error) {
		r.LastKnownGood = &nodeconfigv1.SourceRecord{Source: &nodeconfigv1.ConfigSource{Uid: "u", ResourceVersion: "1"}, WrittenAt: ts}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Records()
	if err != nil || got.GetLastKnownGood().GetWrittenAt().AsTime() != want.GetLastKnownGood().GetWrittenAt().AsTime() || got.GetRevision() != want.GetRevision() {
		t.Fatalf("after reopen %v, want %v (err %v)", got, want, err)
	}
}

func TestOpenRefusesNewerSchemaAndLeavesFileUntouched(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySchema, []byte("99")) }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	before, _ := os.ReadFile(path)
	_, err = Open(path, Options{})
	if !errors.Is(err, ErrNewerSchema) {
		t.Fatalf("err = %v, want ErrNewerSchema", err)
	}
	// The message names both versions and says what to do.
	for _, want := range []string{"schema version 99", "understands up to 2", "not modified", "roll the agent DaemonSet forward", "move the file aside", "local default"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	after, _ := os.ReadFile(path)
	if string(before) != string(after) {
		t.Fatal("the refused store file was modified")
	}
}

func TestOpenRefusesCorruptFilesAndKeepsThem(t *testing.T) {
	whole := filepath.Join(t.TempDir(), "whole.db")
	s, err := Open(whole, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	real, err := os.ReadFile(whole)
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{
		"empty":             {},
		"garbage":           []byte(strings.Repeat("not a bbolt file ", 1000)),
		"truncated to half": real[:len(real)/2],
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.db")
			if err := os.WriteFile(path, content, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Open(path, Options{})
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "left in place") {
				t.Fatalf("err = %v, want ErrCorrupt saying the file is kept", err)
			}
			got, _ := os.ReadFile(path)
			if string(got) != string(content) {
				t.Fatal("the corrupt file was changed")
			}
		})
	}
}

func TestWatchGetsCurrentThenLatestWithoutBlockingWriters(t *testing.T) {
	s := openTemp(t)
	w, ok, err := s.Watch(1)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	defer w.Stop()
	if _, ok, _ := s.Watch(1); ok {
		t.Fatal("a second watch was allowed past the cap of 1")
	}
	if first := <-w.C; first.GetRevision() != 0 {
		t.Fatalf("first state has revision %d, want the current (0)", first.GetRevision())
	}
	// Nobody reads while 50 writes happen: writers must not block.
	for range 50 {
		if _, err := s.UpdateRecords(func(r *nodeconfigv1.Records, ts *timestamppb.Timestamp) (bool, error) {
			r.Error = &nodeconfigv1.ErrorRecord{Error: &nodeconfigv1.ConfigError{Reason: "R", Message: ts.AsTime().String()}, WrittenAt: ts}
			return true, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if latest := <-w.C; latest.GetRevision() != 50 {
		t.Fatalf("slow watcher got revision %d, want the latest (50)", latest.GetRevision())
	}
}

// An error from the system (here: the path is a directory; in life also no
// file descriptors left, a read-only or full disk) is not reported as a
// corrupt store: that message sends operators to the recovery procedure.
func TestOpenFailureFromTheSystemIsNotCalledCorruption(t *testing.T) {
	dir := t.TempDir()
	_, err := Open(dir, Options{})
	if err == nil || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("Open(a directory) = %v; want a plain open error naming the cause", err)
	}
}
