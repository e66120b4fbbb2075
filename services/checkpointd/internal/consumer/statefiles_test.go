package consumer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// stopStart is a consumer whose stop and start the test sees: at each
// start it notes whether the kubelet's CPU manager checkpoint is there.
type stopStart struct {
	state  string
	events []string
}

func (s *stopStart) String() string { return "stop-start" }

func (s *stopStart) Restart(ctx context.Context) error {
	return s.RestartBetween(ctx, func() error { return nil })
}

func (s *stopStart) RestartBetween(_ context.Context, between func() error) error {
	s.events = append(s.events, "stop")
	if err := between(); err != nil {
		return err
	}
	_, err := os.Stat(s.state)
	s.events = append(s.events, "start, checkpoint there: "+map[bool]string{true: "yes", false: "no"}[err == nil])
	return nil
}

// The state files a change refuses go while no kubelet runs, once: the
// restart that removed them is recorded, and a later restart onto the same
// config (an agent killed before it said WAITING) leaves the new kubelet's
// own alone.
func TestStateFilesGoBetweenTheStopAndTheStart(t *testing.T) {
	root := t.TempDir()
	state := filepath.Join(root, "cpu_manager_state")
	if err := os.WriteFile(state, []byte(`{"policyName":"none","defaultCpuSet":"","checksum":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	restarting := func() *nodeconfigv1.ConsumerRecord {
		return &nodeconfigv1.ConsumerRecord{Source: src("2"), Phase: nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_RESTARTING,
			Disruption: &nodeconfigv1.Disruption{Fields: []string{"cpuManagerPolicy"}, Remove: []string{"cpu_manager_state"}}}
	}
	node := &fakeNode{recs: &nodeconfigv1.Records{
		Active:        &nodeconfigv1.SourceRecord{Source: src("2")},
		LastKnownGood: &nodeconfigv1.SourceRecord{Source: src("1")},
		Consumer:      restarting(),
	}}
	g, _, _ := newTestGate(t, node)
	kubelet := &stopStart{state: state}
	g.Restarter, g.KubeletRootDir = kubelet, root
	failures := 0
	g.step(context.Background(), &failures)
	if want := []string{"stop", "start, checkpoint there: no"}; !slices.Equal(kubelet.events, want) {
		t.Fatalf("the kubelet saw %q, want %q", kubelet.events, want)
	}
	if phase(node) != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING {
		t.Fatalf("consumer %v after the restart", node.recs.GetConsumer())
	}
	// The new kubelet writes its own; the agent, killed before it wrote
	// WAITING, restarts it again onto the same config.
	removed := restarting()
	removed.Disruption.Removed = node.recs.GetConsumer().GetDisruption().GetRemoved()
	if removed.Disruption.Removed == nil {
		t.Fatal("the removal was not recorded")
	}
	node.recs.Consumer = removed
	if err := os.WriteFile(state, []byte(`{"policyName":"static"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	kubelet.events = nil
	g.step(context.Background(), &failures)
	if want := []string{"stop", "start, checkpoint there: yes"}; !slices.Equal(kubelet.events, want) {
		t.Fatalf("the second restart: the kubelet saw %q, want %q", kubelet.events, want)
	}
}

// A restarter that cannot act between a stop and a start gets the files
// removed before its restart. One it cannot remove holds nothing up: the
// kubelet is restarted, and nothing says they went.
func TestStateFilesGoBeforeARestarterThatCannotWait(t *testing.T) {
	root := t.TempDir()
	restarting := func() *nodeconfigv1.ConsumerRecord {
		return &nodeconfigv1.ConsumerRecord{Source: src("2"), Phase: nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_RESTARTING,
			Disruption: &nodeconfigv1.Disruption{Remove: []string{"memory_manager_state"}}}
	}
	node := &fakeNode{recs: &nodeconfigv1.Records{Active: &nodeconfigv1.SourceRecord{Source: src("2")}, Consumer: restarting()}}
	g, r, _ := newTestGate(t, node)
	failures := 0
	// No root directory known.
	g.step(context.Background(), &failures)
	if r.n != 1 || phase(node) != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING || node.recs.GetConsumer().GetDisruption().GetRemoved() != nil {
		t.Fatalf("%d restarts, consumer %v; want one restart, WAITING, nothing removed", r.n, node.recs.GetConsumer())
	}
	node.recs.Consumer = restarting()
	g.KubeletRootDir = root
	if err := os.WriteFile(filepath.Join(root, "memory_manager_state"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	g.step(context.Background(), &failures)
	if _, err := os.Stat(filepath.Join(root, "memory_manager_state")); !errors.Is(err, os.ErrNotExist) || r.n != 2 || node.recs.GetConsumer().GetDisruption().GetRemoved() == nil {
		t.Fatalf("state file: %v after %d restarts, consumer %v; want it gone, recorded, and a second restart", err, r.n, node.recs.GetConsumer())
	}
}

// stopStartSystemd answers StopUnit and StartUnit as systemd does.
type stopStartSystemd struct {
	conn *dbus.Conn
	jobs chan string
}

func (f *stopStartSystemd) job(what, name string) (dbus.ObjectPath, *dbus.Error) {
	job := dbus.ObjectPath("/org/freedesktop/systemd1/job/1")
	f.jobs <- what + " " + name
	go func() {
		_ = f.conn.Emit("/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager.JobRemoved", uint32(1), job, name, "done")
	}()
	return job, nil
}

func (f *stopStartSystemd) StopUnit(name, _ string) (dbus.ObjectPath, *dbus.Error) {
	return f.job("stop", name)
}

func (f *stopStartSystemd) StartUnit(name, _ string) (dbus.ObjectPath, *dbus.Error) {
	return f.job("start", name)
}

// Over systemd, a restart with something to do between is a stop, that
// thing, and a start.
func TestSystemdStopsActsAndStarts(t *testing.T) {
	var fake *stopStartSystemd
	r := systemdOnBus(t, func(conn *dbus.Conn) any {
		fake = &stopStartSystemd{conn: conn, jobs: make(chan string, 4)}
		return fake
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var seen []string
	if err := r.RestartBetween(ctx, func() error {
		seen = append(seen, <-fake.jobs, "between")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	seen = append(seen, <-fake.jobs)
	if want := []string{"stop kubelet.service", "between", "start kubelet.service"}; !slices.Equal(seen, want) {
		t.Fatalf("systemd saw %q, want %q", seen, want)
	}
}
