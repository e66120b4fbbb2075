package consumer

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/checkpointd/internal/lifecycle"
	"nodeconfig.io/services/checkpointd/internal/materialize"
	"nodeconfig.io/services/checkpointd/internal/store"
)

// realNode is the node's real lifecycle and store under a clock the test
// moves: the soak is computed from what the store records.
type realNode struct {
	*lifecycle.Node
	clk *clocktesting.FakeClock
}

func (r *realNode) clock() time.Time { return r.clk.Now() }

func (r *realNode) advance(d time.Duration) { r.clk.Step(d) }

type noWake struct{}

func (noWake) Wake() {}

func newRealNode(t *testing.T) *realNode {
	t.Helper()
	dir := t.TempDir()
	n := &realNode{clk: clocktesting.NewFakeClock(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))}
	st, err := store.Open(filepath.Join(dir, "c.db"), store.Options{NoSync: true, Now: n.clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	n.Node = lifecycle.New(lifecycle.Options{Store: st, Target: materialize.Target{Dir: filepath.Join(dir, "target"), Name: "config.yaml"}, Consumer: noWake{}, Log: slog.New(slog.DiscardHandler)})
	return n
}

// activate puts, assigns and activates version rv with a soak of soak.
func (r *realNode) activate(t *testing.T, rv string, soak time.Duration) {
	t.Helper()
	if _, _, err := r.PutCheckpoint(src(rv), map[string]string{"k": "a: " + rv + "\n"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Assign(lifecycle.Assignment{Source: src(rv), SoakSeconds: int64(soak / time.Second), Validator: nodeconfigv1.Validator_VALIDATOR_YAML}); err != nil {
		t.Fatal(err)
	}
	if outcome, _, err := r.Activate(); err != nil || outcome != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED {
		t.Fatalf("Activate = %v, %v", outcome, err)
	}
}

func (r *realNode) records(t *testing.T) *nodeconfigv1.Records {
	t.Helper()
	recs, err := r.Records()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// stepUntil steps the gate until the consumer is in phase, or fails.
func stepUntil(t *testing.T, g *Gate, r *realNode, want nodeconfigv1.ConsumerPhase) {
	t.Helper()
	failures := 0
	for range 10 {
		g.step(context.Background(), &failures)
		if r.records(t).GetConsumer().GetPhase() == want {
			return
		}
	}
	t.Fatalf("consumer is %v after 10 steps, want %v", r.records(t).GetConsumer().GetPhase(), want)
}

func gateOn(t *testing.T, r *realNode, restarter Restarter) *Gate {
	t.Helper()
	healthy, url := consumerStandIn(t)
	healthy.Store(true)
	return NewGate(Gate{Lifecycle: lifecycle.ConsumerNode{Node: r.Node}, Restarter: restarter, Prober: Prober{URL: url}, HealthTimeout: time.Hour, FailureThreshold: 2, Log: slog.New(slog.DiscardHandler)})
}

// A reboot (or any downtime of the agent) does not count toward the soak:
// the time the kubelet was seen healthy before it does, the time after
// that the agent started again does not.
func TestTheSoakCountsOnlyTimeSeenHealthy(t *testing.T) {
	r := newRealNode(t)
	r.activate(t, "2", 600*time.Second)
	g := gateOn(t, r, &countingRestarter{})
	stepUntil(t, g, r, nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY)
	// Healthy for 100 s, seen so by the gate's probes.
	r.advance(100 * time.Second)
	failures := 0
	g.step(context.Background(), &failures)
	// The node is down for an hour; the agent starts again.
	r.advance(time.Hour)
	g = gateOn(t, r, &countingRestarter{})
	stepUntil(t, g, r, nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY)
	recs := r.records(t)
	if end, want := records.SoakEnd(recs), r.clock().Add(500*time.Second); !end.Equal(want) {
		t.Fatalf("soak ends at %v, want %v: 100 s of it were seen healthy before the downtime, the hour down counts for nothing", end, want)
	}
}

// A kubelet restarted by something else mid-soak keeps the soak it had
// earned: the soak pauses while it is down and goes on once it is healthy.
func TestTheSoakPausesWhileTheKubeletIsRestartedBySomethingElse(t *testing.T) {
	r := newRealNode(t)
	r.activate(t, "2", 600*time.Second)
	kubelet := &kubeletProcess{id: "100@1"}
	g := gateOn(t, r, kubelet)
	stepUntil(t, g, r, nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY)
	r.advance(100 * time.Second)
	failures := 0
	g.step(context.Background(), &failures)
	healthy, url := consumerStandIn(t)
	g.Prober = Prober{URL: url}
	kubelet.id = "200@2"
	stepUntil(t, g, r, nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING)
	r.advance(30 * time.Second)
	healthy.Store(true)
	stepUntil(t, g, r, nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY)
	if end, want := records.SoakEnd(r.records(t)), r.clock().Add(500*time.Second); !end.Equal(want) {
		t.Fatalf("soak ends at %v, want %v: 100 s earned before the outside restart, the 30 s down not counted", end, want)
	}
}

// blockingRestarter never finishes a restart by itself (a systemd job that
// hangs).
type blockingRestarter struct{}

func (blockingRestarter) Restart(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
func (blockingRestarter) String() string                    { return "blocking" }

// Every restart has a deadline: a hung restart is retried, not waited on
// for ever.
func TestARestartHasADeadline(t *testing.T) {
	r := newRealNode(t)
	r.activate(t, "2", 600*time.Second)
	g := gateOn(t, r, blockingRestarter{})
	g.HealthTimeout = 100 * time.Millisecond
	done := make(chan struct{})
	go func() {
		defer close(done)
		failures := 0
		g.step(context.Background(), &failures)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the gate still waits on a restart that hangs, 10 s on")
	}
	if c := r.records(t).GetConsumer(); c.GetPhase() != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_RESTARTING || !strings.Contains(c.GetMessage(), "restart failed") {
		t.Fatalf("consumer %v; want RESTARTING with the failed restart's words", c)
	}
}

// namedKubelet is a kubelet found by its cgroup and executable.
type namedKubelet struct{ kubeletProcess }

func (*namedKubelet) Identity() string {
	return "/usr/bin/kubelet in cgroup /system.slice/kubelet.service"
}

// A health endpoint that answers while no process of the consumer runs (a
// k3s or RKE2 kubelet inside another binary) is no proof that the consumer
// read the file: nothing is promoted, and the node says what to set.
func TestAnUnknownConsumerIsNeverPromoted(t *testing.T) {
	r := newRealNode(t)
	r.activate(t, "2", 600*time.Second)
	g := gateOn(t, r, &namedKubelet{kubeletProcess{id: ""}})
	failures := 0
	for range 5 {
		g.step(context.Background(), &failures)
	}
	c := r.records(t).GetConsumer()
	if c.GetPhase() == nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY || !records.SoakStart(r.records(t)).IsZero() {
		t.Fatalf("consumer %v: judged healthy though no process of it runs", c)
	}
	if !strings.Contains(c.GetMessage(), "--consumer-cgroup") {
		t.Fatalf("consumer message %q; want it to say what to set", c.GetMessage())
	}
}
