package crash

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/test/framework/readonlymount"
	"nodeconfig.io/test/framework/sim"
)

// A read-only target directory fails activation with the cause and leaves
// the running config's file alone; a read-only state directory stops
// checkpointd at start with the cause and the store untouched. Both recover
// when the directory is writable again, with last-known-good intact.
func TestReadOnlyDirectoriesFailClearlyAndRecover(t *testing.T) {
	dir, err := os.MkdirTemp("", "nc-ro-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	stateDir, targetDir := filepath.Join(dir, "state"), filepath.Join(dir, "target")
	p, _, client := sim.LoneCheckpointd(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cycle(ctx, client, 1); err != nil {
		t.Fatal(err)
	}

	// Target directory read-only while running.
	undoTarget := readonlymount.Mount(t, targetDir)
	err = cycle(ctx, client, 2)
	if err == nil || !strings.Contains(err.Error(), "read-only file system") {
		t.Fatalf("activating onto a read-only target dir: %v, want an error naming it", err)
	}
	if got, _ := os.ReadFile(filepath.Join(targetDir, sim.TargetFile)); string(got) != payloadFor(1) {
		t.Fatalf("target file changed under a read-only dir (%d bytes)", len(got))
	}
	recs, err := client.GetRecords(ctx, &nodeconfigv1.GetRecordsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if lkg := recs.GetRecords().GetLastKnownGood().GetSource().GetResourceVersion(); lkg != "1" {
		t.Fatalf("last-known-good after the failed activation: %q, want 1", lkg)
	}
	undoTarget()
	if err := cycle(ctx, client, 2); err != nil {
		t.Fatalf("after the target dir is writable again: %v", err)
	}

	// State directory read-only at start.
	if err := p.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(stateDir, "checkpoints.db")
	before, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	undoState := readonlymount.Mount(t, stateDir)
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("checkpointd started on a read-only state dir:\n%s", p.Tail(2000))
	}
	if p.ExitError() == nil || !strings.Contains(p.Tail(2000), "read-only file system") {
		t.Fatalf("checkpointd on a read-only state dir: exit %v, want a failure naming it:\n%s", p.ExitError(), p.Tail(2000))
	}
	undoState()
	if after, _ := os.ReadFile(db); !bytes.Equal(before, after) {
		t.Fatal("the store changed while its directory was read-only")
	}
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	resp, err := client.GetRecords(ctx, &nodeconfigv1.GetRecordsRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	if lkg := resp.GetRecords().GetLastKnownGood().GetSource().GetResourceVersion(); lkg != "2" {
		t.Fatalf("last-known-good after recovery: %q, want 2", lkg)
	}
}
