package consumer

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

func src(rv string) *nodeconfigv1.ConfigSource {
	return &nodeconfigv1.ConfigSource{Namespace: "ns", Name: "cm", Uid: "u", ResourceVersion: rv, Key: "k"}
}

// fakeNode keeps records in memory and rolls back as the lifecycle does:
// last-known-good active, a late error, the consumer to be restarted.
type fakeNode struct {
	recs      *nodeconfigv1.Records
	rollbacks []string
	// lkgRollbacks are rollbacks asked of last-known-good itself (the
	// lifecycle then falls back to the local default).
	lkgRollbacks []string
}

func (f *fakeNode) Records() (*nodeconfigv1.Records, error) { return f.recs, nil }

func (f *fakeNode) SetConsumer(s *nodeconfigv1.ConfigSource, phase nodeconfigv1.ConsumerPhase, message string) (bool, error) {
	if !records.SameSource(s, f.recs.GetActive().GetSource()) {
		return false, nil
	}
	next := &nodeconfigv1.ConsumerRecord{Source: s, Phase: phase, Since: timestamppb.Now(), Message: message}
	if prev := f.recs.GetConsumer(); records.SameSource(prev.GetSource(), s) {
		next.ReadyBefore = prev.GetReadyBefore()
		next.Disruption = prev.GetDisruption()
	}
	f.recs.Consumer = next
	return true, nil
}

func (f *fakeNode) SetReadyBefore(s *nodeconfigv1.ConfigSource, pods []string) (bool, error) {
	c := f.recs.GetConsumer()
	if !records.SameSource(c.GetSource(), s) || c.GetReadyBefore() != nil {
		return false, nil
	}
	c.ReadyBefore = &nodeconfigv1.PodSnapshot{Taken: timestamppb.Now(), Pods: pods}
	return true, nil
}

func (f *fakeNode) SeenHealthy(*nodeconfigv1.ConfigSource) error { return nil }

func (f *fakeNode) StateFilesRemoved(s *nodeconfigv1.ConfigSource) (bool, error) {
	c := f.recs.GetConsumer()
	if !records.SameSource(c.GetSource(), s) || c.GetDisruption() == nil {
		return false, nil
	}
	c.Disruption.Removed = timestamppb.Now()
	return true, nil
}

func (f *fakeNode) RollBack(s *nodeconfigv1.ConfigSource, reason, message string) (bool, error) {
	lkg := f.recs.GetLastKnownGood()
	if records.SameSource(s, lkg.GetSource()) {
		f.lkgRollbacks = append(f.lkgRollbacks, message)
	}
	if !records.SameSource(s, f.recs.GetActive().GetSource()) || records.SameSource(s, lkg.GetSource()) {
		return false, nil
	}
	f.rollbacks = append(f.rollbacks, message)
	f.recs.Active = lkg
	f.recs.Error = &nodeconfigv1.ErrorRecord{Error: &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE, Reason: reason, Message: message}}
	f.recs.Consumer = &nodeconfigv1.ConsumerRecord{Source: lkg.GetSource(), Phase: nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_RESTARTING, Since: timestamppb.Now()}
	return true, nil
}

type countingRestarter struct{ n int }

func (c *countingRestarter) Restart(context.Context) error { c.n++; return nil }
func (c *countingRestarter) String() string                { return "counting" }

// consumerStandIn answers its healthz 200 "ok" or 500 with its own words.
func consumerStandIn(t *testing.T) (*atomic.Bool, string) {
	healthy := &atomic.Bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if healthy.Load() {
			_, _ = w.Write([]byte("ok"))
			return
		}
		http.Error(w, "[-]syncloop failed: no pods synced", http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	return healthy, srv.URL
}

func newTestGate(t *testing.T, node *fakeNode) (*Gate, *countingRestarter, *atomic.Bool) {
	healthy, url := consumerStandIn(t)
	r := &countingRestarter{}
	g := NewGate(Gate{Lifecycle: node, Restarter: r, Prober: Prober{URL: url}, HealthTimeout: time.Hour, FailureThreshold: 2, Log: slog.New(slog.DiscardHandler)})
	// A gate that has been running: its first step here is not the
	// agent's start (soak_test.go's gates are).
	g.started = true
	return g, r, healthy
}

// steps runs the gate n steps, as Run would without the waits between them.
func steps(g *Gate, n int, failures *int) {
	for range n {
		g.step(context.Background(), failures)
	}
}

func phase(n *fakeNode) nodeconfigv1.ConsumerPhase { return n.recs.GetConsumer().GetPhase() }

func TestGateRestartsOntoTheNewConfigAndWaitsForHealth(t *testing.T) {
	node := &fakeNode{recs: &nodeconfigv1.Records{
		Active:        &nodeconfigv1.SourceRecord{Source: src("2")},
		LastKnownGood: &nodeconfigv1.SourceRecord{Source: src("1")},
		Consumer:      &nodeconfigv1.ConsumerRecord{Source: src("2"), Phase: nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_RESTARTING},
	}}
	g, r, healthy := newTestGate(t, node)
	failures := 0
	steps(g, 3, &failures)
	if r.n != 1 || phase(node) != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING {
		t.Fatalf("restarts %d, phase %s; want 1 restart and WAITING while the consumer is unhealthy", r.n, phase(node))
	}
	healthy.Store(true)
	steps(g, 1, &failures)
	if phase(node) != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY || len(node.rollbacks) != 0 {
		t.Fatalf("phase %s rollbacks %v, want HEALTHY and none", phase(node), node.rollbacks)
	}
	if r.n != 1 {
		t.Fatalf("restarted %d times, want once", r.n)
	}
}

func TestGateRollsBackAConsumerThatDoesNotComeBack(t *testing.T) {
	node := &fakeNode{recs: &nodeconfigv1.Records{
		Active:        &nodeconfigv1.SourceRecord{Source: src("2")},
		LastKnownGood: &nodeconfigv1.SourceRecord{Source: src("1")},
		Consumer:      &nodeconfigv1.ConsumerRecord{Source: src("2"), Phase: nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING, Since: timestamppb.New(time.Now().Add(-2 * time.Hour))},
	}}
	g, r, healthy := newTestGate(t, node)
	failures := 0
	steps(g, 1, &failures)
	if len(node.rollbacks) != 1 || !strings.Contains(node.rollbacks[0], "syncloop failed") {
		t.Fatalf("rollbacks %q, want one naming the consumer's own words", node.rollbacks)
	}
	// Back on last-known-good: restarted onto it and healthy there.
	healthy.Store(true)
	steps(g, 2, &failures)
	if r.n != 1 || phase(node) != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY || !records.SameSource(node.recs.GetConsumer().GetSource(), src("1")) {
		t.Fatalf("restarts %d, consumer %v; want restarted onto last-known-good and healthy", r.n, node.recs.GetConsumer())
	}
}

func TestGateRollsBackAConsumerThatTurnsUnhealthyDuringTheSoak(t *testing.T) {
	node := &fakeNode{recs: &nodeconfigv1.Records{
		Assigned:      &nodeconfigv1.AssignedRecord{Source: src("2")},
		Active:        &nodeconfigv1.SourceRecord{Source: src("2")},
		LastKnownGood: &nodeconfigv1.SourceRecord{Source: src("1")},
		Consumer:      &nodeconfigv1.ConsumerRecord{Source: src("2"), Phase: nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY},
	}}
	g, _, _ := newTestGate(t, node)
	failures := 0
	steps(g, 1, &failures)
	if len(node.rollbacks) != 0 {
		t.Fatalf("rolled back after one failed probe of a threshold of two")
	}
	steps(g, 1, &failures)
	if len(node.rollbacks) != 1 || !records.SameSource(node.recs.GetActive().GetSource(), src("1")) {
		t.Fatalf("rollbacks %v active %v, want rolled back to last-known-good", node.rollbacks, node.recs.GetActive())
	}
}

func TestGateRecordsAnUnhealthyConsumerOnLastKnownGoodWithoutRollingBack(t *testing.T) {
	node := &fakeNode{recs: &nodeconfigv1.Records{
		Active:        &nodeconfigv1.SourceRecord{Source: src("1")},
		LastKnownGood: &nodeconfigv1.SourceRecord{Source: src("1")},
		Consumer:      &nodeconfigv1.ConsumerRecord{Source: src("1"), Phase: nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY},
	}}
	g, _, healthy := newTestGate(t, node)
	failures := 0
	steps(g, 2, &failures)
	if len(node.rollbacks) != 0 || phase(node) != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_UNHEALTHY {
		t.Fatalf("rollbacks %v phase %s, want none and UNHEALTHY", node.rollbacks, phase(node))
	}
	healthy.Store(true)
	steps(g, 1, &failures)
	if phase(node) != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY {
		t.Fatalf("phase %s after it recovered, want HEALTHY", phase(node))
	}
}

func TestGateOnANodeThatNeverHadAConfigDoesNotRestart(t *testing.T) {
	node := &fakeNode{recs: &nodeconfigv1.Records{}}
	g, r, healthy := newTestGate(t, node)
	healthy.Store(true)
	failures := 0
	steps(g, 3, &failures)
	if r.n != 0 || phase(node) != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY {
		t.Fatalf("restarts %d phase %s, want no restart and HEALTHY", r.n, phase(node))
	}
}

// crashLooper is a consumer started again and again by its babysitter: a
// new process every time it is looked at.
type crashLooper struct {
	countingRestarter
	n int
}

func (c *crashLooper) Instance() (string, error) { c.n++; return strconv.Itoa(c.n), nil }

func TestGateRollsBackACrashLoopingConsumerBeforeItsTimeout(t *testing.T) {
	node := &fakeNode{recs: &nodeconfigv1.Records{
		Active:        &nodeconfigv1.SourceRecord{Source: src("2")},
		LastKnownGood: &nodeconfigv1.SourceRecord{Source: src("1")},
		Consumer:      &nodeconfigv1.ConsumerRecord{Source: src("2"), Phase: nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING, Since: timestamppb.Now()},
	}}
	g, _, _ := newTestGate(t, node)
	g.Restarter = &crashLooper{}
	failures := 0
	steps(g, 2, &failures)
	if len(node.rollbacks) != 0 {
		t.Fatalf("rolled back after two processes of a threshold of three")
	}
	steps(g, 1, &failures)
	if len(node.rollbacks) != 1 || !strings.Contains(node.rollbacks[0], "crash-looping") {
		t.Fatalf("rollbacks %q, want one for a crash loop (HealthTimeout is an hour)", node.rollbacks)
	}
}

func TestLastErrorLineIsTheConsumersOwnWords(t *testing.T) {
	log := filepath.Join(t.TempDir(), "kubelet.log")
	content := "I1122 11:00:00.000000 1 server.go:1] starting\n" +
		`E1122 11:00:01.000000 1 run.go:72] "command failed" err="failed to merge kubelet configs: json: cannot unmarshal string into Go struct field KubeletConfiguration.maxPods of type int32"` + "\n" +
		"I1122 11:00:01.100000 1 other.go:1] bye\n\n"
	if err := os.WriteFile(log, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := LastErrorLine(log); !strings.Contains(got, "maxPods of type int32") {
		t.Fatalf("LastErrorLine = %q, want the kubelet's exit line", got)
	}
	if got := LastErrorLine(filepath.Join(t.TempDir(), "absent.log")); got != "" {
		t.Fatalf("no log file: %q", got)
	}
}
