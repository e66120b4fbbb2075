package crash

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nodeconfig.io/test/framework/sim"
)

// A store damaged on disk makes checkpointd refuse to start with a clear
// message, and the file stays exactly as it was for inspection — never a
// silently re-created store that has lost last-known-good.
func TestCorruptStoreIsRefusedAndKept(t *testing.T) {
	// A real store, to damage in several ways.
	good := t.TempDir()
	p, socket, err := sim.StartCheckpointd(good)
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.WaitServing("unix://"+socket, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	original, err := os.ReadFile(filepath.Join(good, "state", "checkpoints.db"))
	if err != nil {
		t.Fatal(err)
	}
	for name, damaged := range map[string][]byte{
		"truncated to zero": {},
		"truncated to half": original[:len(original)/2],
		"random bytes":      []byte(strings.Repeat("\x13\x37garbage", 4096)),
		"header clobbered":  append([]byte(strings.Repeat("\x00", 8192)), original[8192:]...),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			db := filepath.Join(dir, "state", "checkpoints.db")
			if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(db, damaged, 0o600); err != nil {
				t.Fatal(err)
			}
			p, _, err := sim.StartCheckpointd(dir)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-p.Done():
			case <-time.After(20 * time.Second):
				p.Kill()
				t.Fatalf("checkpointd started on a damaged store:\n%s", p.Tail(2000))
			}
			if p.ExitError() == nil {
				t.Fatal("checkpointd exited 0 on a damaged store")
			}
			if log := p.Tail(4000); !strings.Contains(log, "corrupt") || !strings.Contains(log, "left in place") {
				t.Fatalf("the refusal does not say what is wrong and that the file is kept:\n%s", log)
			}
			after, err := os.ReadFile(db)
			if err != nil || string(after) != string(damaged) {
				t.Fatalf("the damaged store was changed or removed (err %v)", err)
			}
		})
	}
}
