package audit

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func line(verb, ua, resource string) string {
	return `{"stage":"ResponseComplete","verb":"` + verb + `","userAgent":"` + ua + `","objectRef":{"resource":"` + resource + `"}}` + "\n"
}

func appendLines(path, s string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(s)
	return err
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	if err := appendLines(path, s); err != nil {
		t.Fatal(err)
	}
}

// writer appends what next returns every period until stopped, from its
// own goroutine.
func writer(t *testing.T, path string, period time.Duration, next func(i int) string) (stop func()) {
	t.Helper()
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			if err := appendLines(path, next(i)); err != nil {
				t.Error(err)
				return
			}
			select {
			case <-quit:
				return
			case <-time.After(period):
			}
		}
	}()
	return func() { close(quit); <-done }
}

// The log is read on from where the last read stopped; a line still being
// written is counted once it is whole, and only once.
func TestLogCountsAsTheFileGrows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	appendTo(t, path, line("patch", "nodeconfig-statusd/v1", "nodes")+line("get", "nodeconfig-statusd/v1", "nodes")+
		`{"stage":"RequestReceived","verb":"patch","userAgent":"nodeconfig-statusd"}`+"\n"+line("create", "kubectl", "configmaps"))
	l := NewLog(path)
	w, err := l.Writes()
	if err != nil || w != (WriteCounts{Statusd: 1}) {
		t.Fatalf("first read %+v (%v), want one statusd write", w, err)
	}
	whole := line("create", "nodeconfig-reconciler", "events")
	appendTo(t, path, whole[:20])
	if w, _ = l.Writes(); w != (WriteCounts{Statusd: 1}) {
		t.Fatalf("a half-written line was counted: %+v", w)
	}
	appendTo(t, path, whole[20:]+line("update", "nodeconfig-reconciler", "nodeconfigs")+line("update", "nodeconfig-reconciler", "leases"))
	want := WriteCounts{Statusd: 1, Events: 1, NodeConfig: 1, Leases: 1}
	if w, _ = l.Writes(); w != want {
		t.Fatalf("after the rest %+v, want %+v", w, want)
	}
	if w, _ := CountWrites(path); w != want {
		t.Fatalf("CountWrites %+v, want %+v", w, want)
	}
	if w.Total() != 3 {
		t.Fatalf("Total %d, want 3 (leases aside)", w.Total())
	}
}

// Settled returns once no write came for the quiet period, with every
// write before it; lease renewals do not keep it waiting.
func TestSettledWaitsForTheWritesToStop(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	appendTo(t, path, "")
	// Ten writes 50 ms apart, lease renewals throughout.
	stop := writer(t, path, 50*time.Millisecond, func(i int) string {
		s := line("update", "nodeconfig-reconciler", "leases")
		if i < 10 {
			s += line("patch", "nodeconfig-statusd", "nodes")
		}
		return s
	})
	defer stop()
	const quiet = time.Second
	w, err := NewLog(path).Settled(quiet, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if w.Statusd != 10 {
		t.Fatalf("settled with %d of the 10 writes", w.Statusd)
	}
}

// A log that never stops being written to is reported, not waited on.
func TestSettledGivesUp(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	appendTo(t, path, "")
	stop := writer(t, path, 20*time.Millisecond, func(int) string { return line("patch", "nodeconfig-statusd", "nodes") })
	defer stop()
	_, err := NewLog(path).Settled(300*time.Millisecond, time.Second)
	if err == nil || !strings.Contains(err.Error(), "did not stop") {
		t.Fatalf("err %v, want the writes reported as never stopping", err)
	}
}

// A TokenRequest, a TokenReview and an access review store nothing: they
// count as Unstored, not in Total, whoever makes them (statusd too).
func TestCreatesThatStoreNothingAreCountedApart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	tokenRequest := `{"stage":"ResponseComplete","verb":"create","userAgent":"nodeconfig-reconciler/v0.1.0",` +
		`"objectRef":{"resource":"serviceaccounts","namespace":"nodeconfig-system","name":"nodeconfig-reconciler","subresource":"token"}}` + "\n"
	appendTo(t, path, tokenRequest+line("create", "nodeconfig-checkpointd", "tokenreviews")+line("create", "nodeconfig-statusd", "tokenreviews")+
		line("create", "nodeconfig-statusd", "subjectaccessreviews")+line("create", "nodeconfig-reconciler", "serviceaccounts")+
		line("patch", "nodeconfig-statusd", "nodes"))
	w, err := CountWrites(path)
	want := WriteCounts{Statusd: 1, Other: 1, Unstored: 4}
	if err != nil || w != want {
		t.Fatalf("%+v (%v), want %+v", w, err, want)
	}
	if w.Total() != 2 {
		t.Fatalf("Total %d, want 2: a ServiceAccount created and a Node patched", w.Total())
	}
}

// TokenRequests reads each completed TokenRequest with its time, account,
// status and (where the request is logged) audiences.
func TestTokenRequestsReadsAudiences(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	ev := func(stage, received, audiences string, code int) string {
		return `{"kind":"Event","level":"Request","stage":"` + stage + `","verb":"create","userAgent":"nodeconfig-reconciler/v0.1.0",` +
			`"objectRef":{"resource":"serviceaccounts","namespace":"nodeconfig-system","name":"nodeconfig-reconciler","apiVersion":"v1","subresource":"token"},` +
			`"responseStatus":{"metadata":{},"code":` + strconv.Itoa(code) + `},` +
			`"requestObject":{"kind":"TokenRequest","apiVersion":"authentication.k8s.io/v1","metadata":{"creationTimestamp":null},` +
			`"spec":{"audiences":` + audiences + `,"expirationSeconds":600,"boundObjectRef":null},"status":{"token":"","expirationTimestamp":null}},` +
			`"requestReceivedTimestamp":"` + received + `","stageTimestamp":"` + received + `"}` + "\n"
	}
	appendTo(t, path, ev("ResponseComplete", "2026-11-22T12:00:01.123456Z", `["nodeconfig-agent/n-0"]`, 201)+
		ev("ResponseStarted", "2026-11-22T12:00:02.000000Z", `["nodeconfig-agent/n-1"]`, 201)+
		ev("ResponseComplete", "2026-11-22T12:00:03.000000Z", `["nodeconfig-agent/n-1"]`, 422)+
		line("create", "nodeconfig-checkpointd", "tokenreviews"))
	got, err := TokenRequests(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d TokenRequests, want the 2 completed: %+v", len(got), got)
	}
	at := time.Date(2026, 11, 22, 12, 0, 1, 123456000, time.UTC)
	if g := got[0]; !g.At.Equal(at) || g.Account != "nodeconfig-system/nodeconfig-reconciler" || g.Code != 201 ||
		len(g.Audiences) != 1 || g.Audiences[0] != "nodeconfig-agent/n-0" || !strings.HasPrefix(g.UserAgent, "nodeconfig-reconciler") {
		t.Fatalf("first TokenRequest %+v", g)
	}
	if got[1].Code != 422 {
		t.Fatalf("second TokenRequest %+v, want the refused one", got[1])
	}
}
