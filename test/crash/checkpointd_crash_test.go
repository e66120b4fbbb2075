// Package crash kills checkpointd with SIGKILL at random moments while it
// works, and checks after every kill that nothing durable was lost.
package crash

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/test/sim"
)

// payloadFor is version v's config: 64 KiB, so a torn write would show.
func payloadFor(v int) string {
	head := fmt.Sprintf("version: %d\npadding: \"", v)
	return head + strings.Repeat(strconv.Itoa(v%10), 64<<10-len(head)-2) + "\"\n"
}

func source(v int) *nodeconfigv1.ConfigSource {
	return &nodeconfigv1.ConfigSource{Namespace: "ns", Name: "cm", Uid: "crash-uid", ResourceVersion: strconv.Itoa(v), Key: "config.yaml"}
}

// cycle takes version v through put, assign, activate and promote.
func cycle(ctx context.Context, c nodeconfigv1.CheckpointServiceClient, v int) error {
	if _, err := c.PutCheckpoint(ctx, &nodeconfigv1.PutCheckpointRequest{Source: source(v), Data: map[string]string{"config.yaml": payloadFor(v)}}); err != nil {
		return err
	}
	if _, err := c.SetAssigned(ctx, &nodeconfigv1.SetAssignedRequest{Source: source(v), SoakSeconds: 1}); err != nil {
		return err
	}
	if _, err := c.Activate(ctx, &nodeconfigv1.ActivateRequest{}); err != nil {
		return err
	}
	_, err := c.PromoteLastKnownGood(ctx, &nodeconfigv1.PromoteLastKnownGoodRequest{Source: source(v)})
	return err
}

// TestCheckpointdSurvivesSIGKILLAtRandomMoments: after each kill the store
// opens, last-known-good is never older than the newest confirmed
// promotion, records name stored payloads, and the target file is always a
// whole payload.
func TestCheckpointdSurvivesSIGKILLAtRandomMoments(t *testing.T) {
	kills := 200
	if v, err := strconv.Atoi(os.Getenv("CRASH_KILLS")); err == nil {
		kills = v
	}
	dir := t.TempDir()
	targetDir := filepath.Join(dir, "target")
	p, socket, client := sim.LoneCheckpointd(t, dir)

	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	confirmedLKG, attempted, cycles := 0, 0, 0
	for kill := 0; kill < kills; kill++ {
		if err := sim.WaitServing("unix://"+socket, 20*time.Second); err != nil {
			t.Fatalf("kill %d: checkpointd did not come back: %v\n%s", kill, err, p.Tail(3000))
		}
		checkInvariants(t, kill, client, targetDir, confirmedLKG, attempted)

		// Work until the kill lands at a random moment.
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			for ctx.Err() == nil {
				attempted++
				v := attempted
				if err := cycle(ctx, client, v); err != nil {
					return
				}
				confirmedLKG = v
				cycles++
			}
		}()
		time.Sleep(time.Duration(rng.IntN(40_000)) * time.Microsecond)
		p.Kill()
		cancel()
		<-done
		if err := p.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	if err := sim.WaitServing("unix://"+socket, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, kills, client, targetDir, confirmedLKG, attempted)
	t.Logf("%d SIGKILLs survived over %d completed put/assign/activate/promote cycles (%d attempted)", kills, cycles, attempted)
}

func checkInvariants(t *testing.T, kill int, client nodeconfigv1.CheckpointServiceClient, targetDir string, confirmedLKG, attempted int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The client's connection may still hold the refusal from the kill.
	resp, err := client.GetRecords(ctx, &nodeconfigv1.GetRecordsRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("kill %d: GetRecords: %v", kill, err)
	}
	recs := resp.GetRecords()
	lkg, _ := strconv.Atoi(recs.GetLastKnownGood().GetSource().GetResourceVersion())
	if lkg < confirmedLKG || lkg > attempted {
		t.Fatalf("kill %d: last-known-good is version %d; confirmed %d, attempted up to %d", kill, lkg, confirmedLKG, attempted)
	}
	for name, src := range map[string]*nodeconfigv1.ConfigSource{
		"assigned": recs.GetAssigned().GetSource(), "active": recs.GetActive().GetSource(), "lastKnownGood": recs.GetLastKnownGood().GetSource(),
	} {
		if src == nil {
			continue
		}
		if _, err := client.GetCheckpoint(ctx, &nodeconfigv1.GetCheckpointRequest{Uid: src.GetUid(), ResourceVersion: src.GetResourceVersion()}); err != nil {
			t.Fatalf("kill %d: %s names %s, whose payload is gone: %v", kill, name, src.GetResourceVersion(), err)
		}
	}
	content, err := os.ReadFile(filepath.Join(targetDir, sim.TargetFile))
	active := recs.GetActive().GetSource()
	if active == nil {
		if err == nil {
			t.Fatalf("kill %d: nothing active but the target file exists", kill)
		}
		return
	}
	v, _ := strconv.Atoi(active.GetResourceVersion())
	if err != nil || string(content) != payloadFor(v) {
		t.Fatalf("kill %d: target is not the whole payload of active version %d (read %d bytes, err %v)", kill, v, len(content), err)
	}
}
