package consumer

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// startedKubelet is a restarter that tells when the running kubelet
// started.
type startedKubelet struct {
	countingRestarter
	started time.Time
}

func (k *startedKubelet) StartTime() (time.Time, error) { return k.started, nil }

// Turning the gate on (an agent upgrade, a new flag) must not restart
// every kubelet at once, outside any window: a kubelet that started after
// the active file was written runs it already, and is only watched.
func TestTurningTheGateOnRestartsNoKubeletThatReadTheFile(t *testing.T) {
	written := time.Now().Add(-time.Hour)
	node := &fakeNode{recs: &nodeconfigv1.Records{
		Active:        &nodeconfigv1.SourceRecord{Source: src("2"), WrittenAt: timestamppb.New(written)},
		LastKnownGood: &nodeconfigv1.SourceRecord{Source: src("2")},
	}}
	g, _, healthy := newTestGate(t, node)
	healthy.Store(true)
	kubelet := &startedKubelet{started: written.Add(time.Minute)}
	g.Restarter = kubelet
	failures := 0
	steps(g, 3, &failures)
	if kubelet.n != 0 || phase(node) != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY {
		t.Fatalf("restarts %d, phase %v; want no restart of a kubelet that started after the file was written, and HEALTHY", kubelet.n, phase(node))
	}
	// One that started before the file was written runs an older one.
	node.recs.Consumer = nil
	kubelet.started = written.Add(-time.Minute)
	steps(g, 2, &failures)
	if kubelet.n != 1 {
		t.Fatalf("restarts %d; want one for a kubelet older than the file", kubelet.n)
	}
}

func TestSignalTellsWhenTheConsumerStarted(t *testing.T) {
	before := time.Now().Add(-2 * time.Second) // /proc counts in clock ticks
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pidFile := filepath.Join(t.TempDir(), "sleep.pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	started, err := Signal{PidFile: pidFile}.StartTime()
	if err != nil || started.Before(before) || started.After(time.Now().Add(2*time.Second)) {
		t.Fatalf("StartTime = %v, %v; want about now", started, err)
	}
	if got, err := (Signal{PidFile: filepath.Join(t.TempDir(), "absent.pid")}).StartTime(); err != nil || !got.IsZero() {
		t.Fatalf("StartTime of no process = %v, %v; want zero", got, err)
	}
}

// A blip of a kubelet long on its proven config is watched, not judged:
// last-known-good is not given up for it.
func TestAnOutageOnAProvenConfigGivesNothingUp(t *testing.T) {
	node := &fakeNode{recs: &nodeconfigv1.Records{
		Assigned:      &nodeconfigv1.AssignedRecord{Source: src("1")},
		Active:        &nodeconfigv1.SourceRecord{Source: src("1")},
		LastKnownGood: &nodeconfigv1.SourceRecord{Source: src("1")},
		Consumer:      &nodeconfigv1.ConsumerRecord{Source: src("1"), Phase: nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY, Since: timestamppb.Now()},
	}}
	g, _, _ := newTestGate(t, node)
	failures := 0
	steps(g, 4, &failures)
	if len(node.lkgRollbacks) != 0 || phase(node) != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_UNHEALTHY {
		t.Fatalf("rollbacks of last-known-good %v, phase %v; want none and UNHEALTHY, watched", node.lkgRollbacks, phase(node))
	}
}
