package audit

import (
	"os"
	"path/filepath"
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
