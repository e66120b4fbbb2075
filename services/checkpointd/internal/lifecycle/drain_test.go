package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/util/wait"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/configcheck/disruption"
)

// fakeDrainer is a Node and its pods as the drain sees them.
type fakeDrainer struct {
	mu       sync.Mutex
	cordoned bool
	calls    []string
	// evict, when set, is the eviction's outcome (nil: the pods go).
	evict func(ctx context.Context) error
}

func (d *fakeDrainer) note(call string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, call)
}

func (d *fakeDrainer) Cordoned(context.Context) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cordoned, nil
}

func (d *fakeDrainer) Cordon(context.Context) error {
	d.note("cordon")
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cordoned = true
	return nil
}

func (d *fakeDrainer) Uncordon(context.Context) error {
	d.note("uncordon")
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cordoned = false
	return nil
}

func (d *fakeDrainer) Evict(ctx context.Context) error {
	d.note("evict")
	if d.evict != nil {
		return d.evict(ctx)
	}
	return nil
}

func (d *fakeDrainer) state() (bool, []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cordoned, slices.Clone(d.calls)
}

// drainNode is a kubelet node with a consumer and a drainer, its drains
// run until the test ends.
func drainNode(t *testing.T, d *fakeDrainer) *fixture {
	t.Helper()
	f := kubeletNode(t)
	f.node = New(Options{Store: f.store, Target: f.target, Consumer: &wakes{}, Kubelet: f.node.kubelet, Drainer: d, Log: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.node.RunDrains(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return f
}

// activateWith puts, assigns (validator kubelet) and activates version rv.
func (f *fixture) activateWith(t *testing.T, rv, content string, drain *nodeconfigv1.DrainPolicy) (nodeconfigv1.ActivateOutcome, error) {
	t.Helper()
	f.put(t, rv, content)
	if _, err := f.node.Assign(Assignment{Source: src(rv), SoakSeconds: 60, Validator: nodeconfigv1.Validator_VALIDATOR_KUBELET, Drain: drain}); err != nil {
		t.Fatal(err)
	}
	outcome, _, err := f.node.Activate()
	return outcome, err
}

func (f *fixture) healthyOn(t *testing.T, rv string) {
	t.Helper()
	if ok, err := (ConsumerNode{f.node}).SetConsumer(src(rv), nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY, "ok"); err != nil || !ok {
		t.Fatalf("consumer healthy on %s: %v %v", rv, ok, err)
	}
}

func (f *fixture) waitRecords(t *testing.T, what string, ok func(*nodeconfigv1.Records) bool) *nodeconfigv1.Records {
	t.Helper()
	var recs *nodeconfigv1.Records
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		recs = f.records(t)
		return ok(recs), nil
	}); err != nil {
		t.Fatalf("waiting for %s: %v (records %v)", what, err, recs)
	}
	return recs
}

// settled runs version rv healthy and promoted on the node.
func (f *fixture) settled(t *testing.T, rv, content string) {
	t.Helper()
	if outcome, err := f.activateWith(t, rv, content, nil); err != nil || outcome != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED {
		t.Fatalf("version %s: %v %v", rv, outcome, err)
	}
	f.healthyOn(t, rv)
	f.promote(t, rv)
}

// A change of a field that needs a drain: nothing is written until the
// node is drained; then the node activates by itself, records what the
// restart removes, and takes pods again once the kubelet is healthy on it.
func TestAChangeThatNeedsADrainWaitsForIt(t *testing.T) {
	d := &fakeDrainer{}
	release := make(chan struct{})
	d.evict = func(ctx context.Context) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f := drainNode(t, d)
	first := kubeletHeader + "maxPods: 57\n"
	f.settled(t, "1", first)
	if _, calls := d.state(); len(calls) != 0 {
		t.Fatalf("a change of maxPods drained the node: %q", calls)
	}

	static := kubeletHeader + "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n"
	outcome, err := f.activateWith(t, "2", static, nil)
	if err != nil || outcome != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_DRAINING {
		t.Fatalf("Activate = %v, %v; want DRAINING", outcome, err)
	}
	recs := f.records(t)
	if got, _ := f.targetContent(t); got != first || !records.SameSource(recs.GetActive().GetSource(), src("1")) {
		t.Fatalf("while draining: file %q, active %v; want version 1's, untouched", got, recs.GetActive())
	}
	if dr := recs.GetDrain(); dr.GetPhase() != nodeconfigv1.DrainPhase_DRAIN_PHASE_DRAINING || !strings.Contains(dr.GetWhy(), "cpuManagerPolicy, reservedSystemCPUs") || dr.GetTimeoutSeconds() != 300 {
		t.Fatalf("drain record %v", dr)
	}
	since := recs.GetDrain().GetSince()
	// The reconciler asks again while it drains: the same drain.
	if outcome, _, err := f.node.Activate(); err != nil || outcome != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_DRAINING {
		t.Fatalf("Activate again = %v, %v", outcome, err)
	}
	f.waitRecords(t, "the cordon noted", func(r *nodeconfigv1.Records) bool { return r.GetDrain().GetCordoned() })
	if !f.records(t).GetDrain().GetSince().AsTime().Equal(since.AsTime()) {
		t.Fatal("asking again started another drain")
	}
	close(release)
	recs = f.waitRecords(t, "activated once drained", func(r *nodeconfigv1.Records) bool {
		return records.SameSource(r.GetActive().GetSource(), src("2"))
	})
	if got, _ := f.targetContent(t); got != static {
		t.Fatalf("file %q after the drain", got)
	}
	c := recs.GetConsumer()
	if c.GetPhase() != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_RESTARTING || !slices.Equal(c.GetDisruption().GetRemove(), []string{disruption.CPUManagerState}) ||
		!slices.Equal(c.GetDisruption().GetFields(), []string{"cpuManagerPolicy", "maxPods", "reservedSystemCPUs"}) {
		t.Fatalf("consumer %v; want RESTARTING, removing cpu_manager_state", c)
	}
	if cordoned, _ := d.state(); !cordoned || recs.GetDrain().GetPhase() != nodeconfigv1.DrainPhase_DRAIN_PHASE_DRAINED {
		t.Fatalf("cordoned %v, drain %v before the kubelet is healthy; want it kept cordoned, DRAINED", cordoned, recs.GetDrain())
	}
	f.healthyOn(t, "2")
	f.waitRecords(t, "the drain over", func(r *nodeconfigv1.Records) bool { return r.GetDrain() == nil })
	if cordoned, calls := d.state(); cordoned || !slices.Equal(calls, []string{"cordon", "evict", "uncordon"}) {
		t.Fatalf("cordoned %v, calls %q; want cordon, evict, uncordon", cordoned, calls)
	}

	// (maxPods: version 1 set it, and 2 leaves the site drop-in's.)
	// The way back removes the checkpoint again (a rollback drains nothing:
	// it recovers the node).
	if _, err := (ConsumerNode{f.node}).RollBack(src("2"), records.ReasonHealthGateFailed, "gate"); err != nil {
		t.Fatal(err)
	}
	c = f.records(t).GetConsumer()
	if !records.SameSource(c.GetSource(), src("1")) || c.GetPhase() != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_RESTARTING || !slices.Equal(c.GetDisruption().GetRemove(), []string{disruption.CPUManagerState}) {
		t.Fatalf("consumer after the rollback %v; want RESTARTING onto 1, removing cpu_manager_state", c)
	}
}

// A drain that cannot finish within its bound: the node is uncordoned, the
// kubelet not restarted, an early error names the pods left, and the drain
// is tried again only after a while.
func TestADrainThatCannotFinishIsAnEarlyError(t *testing.T) {
	d := &fakeDrainer{}
	d.evict = func(ctx context.Context) error {
		<-ctx.Done()
		return errors.New("the drain did not finish within 1s: 1 pods left on the node: app/blocker (eviction refused: Cannot evict pod as it would violate the pod's disruption budget.)")
	}
	f := drainNode(t, d)
	first := kubeletHeader + "maxPods: 57\n"
	f.settled(t, "1", first)
	bound := &nodeconfigv1.DrainPolicy{TimeoutSeconds: 1}
	if outcome, err := f.activateWith(t, "2", kubeletHeader+"topologyManagerScope: pod\n", bound); err != nil || outcome != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_DRAINING {
		t.Fatalf("Activate = %v, %v; want DRAINING", outcome, err)
	}
	recs := f.waitRecords(t, "the drain's early error", func(r *nodeconfigv1.Records) bool { return r.GetError() != nil })
	e := recs.GetError().GetError()
	if e.GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY || e.GetReason() != records.ReasonDrainFailed || !strings.Contains(e.GetMessage(), "app/blocker") ||
		!strings.Contains(e.GetMessage(), "topologyManagerScope") {
		t.Fatalf("error %v; want an early DrainFailed naming app/blocker and the field", e)
	}
	if cordoned, calls := d.state(); cordoned || !slices.Equal(calls, []string{"cordon", "evict", "uncordon"}) {
		t.Fatalf("cordoned %v, calls %q; want the node uncordoned", cordoned, calls)
	}
	if got, _ := f.targetContent(t); got != first || !records.SameSource(recs.GetActive().GetSource(), src("1")) || recs.GetDrain() != nil ||
		recs.GetConsumer().GetPhase() != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY {
		t.Fatalf("after the failed drain: file %q, records %v; want version 1 active and the kubelet left alone", got, recs)
	}
	// Asked again at once: the same error, and no drain.
	_, _, err := f.node.Activate()
	var wf *WriteFailedError
	if !errors.As(err, &wf) || wf.Reason != records.ReasonDrainFailed || !strings.Contains(err.Error(), "the next drain starts at") {
		t.Fatalf("Activate right after = %v; want the DrainFailed early error", err)
	}
	if _, calls := d.state(); len(calls) != 3 {
		t.Fatalf("calls %q: a drain started again at once", calls)
	}
	// Later, the next drain starts; its error stays said meanwhile.
	f.advance(31 * time.Second)
	if outcome, _, err := f.node.Activate(); err != nil || outcome != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_DRAINING {
		t.Fatalf("Activate later = %v, %v; want DRAINING", outcome, err)
	}
	if f.records(t).GetError().GetError().GetReason() != records.ReasonDrainFailed {
		t.Fatal("the last drain's error went before this one ended")
	}
}

// spec.rollout.drain.when Always drains before any change that restarts
// the kubelet, and not for one it runs the same; without a way to drain,
// such a change is an early error.
func TestDrainAlwaysButNotForNothing(t *testing.T) {
	always := &nodeconfigv1.DrainPolicy{Always: true}
	d := &fakeDrainer{}
	f := drainNode(t, d)
	f.settled(t, "1", kubeletHeader+"maxPods: 57\n")
	if outcome, err := f.activateWith(t, "2", "# the same\n"+kubeletHeader+"maxPods: 57\n", always); err != nil || outcome != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED {
		t.Fatalf("the same config again = %v, %v; want ACTIVATED without a drain", outcome, err)
	}
	f.promote(t, "2")
	if outcome, err := f.activateWith(t, "3", kubeletHeader+"maxPods: 58\n", always); err != nil || outcome != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_DRAINING {
		t.Fatalf("maxPods 58 with drain Always = %v, %v; want DRAINING", outcome, err)
	}
	recs := f.waitRecords(t, "drained and activated", func(r *nodeconfigv1.Records) bool { return records.SameSource(r.GetActive().GetSource(), src("3")) })
	if !strings.Contains(recs.GetDrain().GetWhy(), "spec.rollout.drain.when is Always") {
		t.Fatalf("drain %v", recs.GetDrain())
	}

	g := kubeletNode(t)
	g.node = New(Options{Store: g.store, Target: g.target, Consumer: &wakes{}, Kubelet: g.node.kubelet})
	_, err := g.activateWith(t, "1", kubeletHeader+"topologyManagerPolicy: best-effort\n", nil)
	var wf *WriteFailedError
	if !errors.As(err, &wf) || wf.Reason != records.ReasonDrainFailed || !strings.Contains(err.Error(), "cannot drain its node") {
		t.Fatalf("a drain without a drainer = %v", err)
	}
}

// A change of the cgroup layout is refused: nothing is written, nothing
// drained.
func TestAChangeOfTheCgroupLayoutIsRefused(t *testing.T) {
	d := &fakeDrainer{}
	f := drainNode(t, d)
	f.settled(t, "1", kubeletHeader+"maxPods: 57\n")
	if outcome, err := f.activateWith(t, "2", kubeletHeader+"cgroupsPerQOS: false\nenforceNodeAllocatable: []\n", nil); err != nil || outcome != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ROLLED_BACK {
		t.Fatalf("Activate = %v, %v; want ROLLED_BACK", outcome, err)
	}
	e := f.records(t).GetError().GetError()
	if e.GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE || e.GetReason() != records.ReasonChangeRefused || !strings.Contains(e.GetMessage(), "cgroupsPerQOS (") {
		t.Fatalf("error %v", e)
	}
	if got, _ := f.targetContent(t); got != kubeletHeader+"maxPods: 57\n" {
		t.Fatalf("file %q", got)
	}
	if _, calls := d.state(); len(calls) != 0 {
		t.Fatalf("drain calls %q", calls)
	}
}

// An operator's cordon is the operator's: the drain neither sets nor lifts
// it.
func TestADrainLeavesAnOperatorsCordon(t *testing.T) {
	d := &fakeDrainer{cordoned: true}
	f := drainNode(t, d)
	f.settled(t, "1", kubeletHeader+"maxPods: 57\n")
	if _, err := f.activateWith(t, "2", kubeletHeader+"topologyManagerScope: pod\n", nil); err != nil {
		t.Fatal(err)
	}
	f.waitRecords(t, "activated", func(r *nodeconfigv1.Records) bool { return records.SameSource(r.GetActive().GetSource(), src("2")) })
	f.healthyOn(t, "2")
	f.waitRecords(t, "the drain over", func(r *nodeconfigv1.Records) bool { return r.GetDrain() == nil })
	if cordoned, calls := d.state(); !cordoned || !slices.Equal(calls, []string{"evict"}) {
		t.Fatalf("cordoned %v, calls %q; want the operator's cordon left as it was", cordoned, calls)
	}
}

// A drain whose change is no longer assigned is called off: its cordon is
// lifted.
func TestADrainOfAChangeNoLongerAssignedEnds(t *testing.T) {
	d := &fakeDrainer{}
	d.evict = func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	f := drainNode(t, d)
	f.settled(t, "1", kubeletHeader+"maxPods: 57\n")
	if _, err := f.activateWith(t, "2", kubeletHeader+"topologyManagerScope: pod\n", nil); err != nil {
		t.Fatal(err)
	}
	f.waitRecords(t, "cordoned", func(r *nodeconfigv1.Records) bool { return r.GetDrain().GetCordoned() })
	if outcome, err := f.activateWith(t, "3", kubeletHeader+"maxPods: 58\n", nil); err != nil || outcome != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED {
		t.Fatalf("the next version = %v, %v", outcome, err)
	}
	recs := f.waitRecords(t, "the drain called off", func(r *nodeconfigv1.Records) bool { return r.GetDrain() == nil })
	if cordoned, _ := d.state(); cordoned || recs.GetError() != nil {
		t.Fatalf("cordoned %v, error %v; want the node uncordoned, nothing blamed", cordoned, recs.GetError())
	}
}

// An agent that starts again mid-drain resumes it within the bound it
// began with: past it, the drain fails and the agent's cordon is lifted.
func TestADrainResumesAfterTheAgentStartsAgain(t *testing.T) {
	d := &fakeDrainer{cordoned: true}
	d.evict = func(ctx context.Context) error { <-ctx.Done(); return fmt.Errorf("1 pods left: %w", ctx.Err()) }
	f := kubeletNode(t)
	f.settled(t, "1", kubeletHeader+"maxPods: 57\n")
	f.put(t, "2", kubeletHeader+"topologyManagerScope: pod\n")
	if _, err := f.node.Assign(Assignment{Source: src("2"), SoakSeconds: 60, Validator: nodeconfigv1.Validator_VALIDATOR_KUBELET}); err != nil {
		t.Fatal(err)
	}
	// What the agent before recorded: a drain it cordoned for, begun
	// longer ago than its bound.
	if _, err := f.store.UpdateRecords(func(r *nodeconfigv1.Records, now *timestamppb.Timestamp) (bool, error) {
		r.Drain = &nodeconfigv1.DrainRecord{Source: src("2"), Phase: nodeconfigv1.DrainPhase_DRAIN_PHASE_DRAINING, Since: timestamppb.New(now.AsTime().Add(-time.Hour)),
			TimeoutSeconds: 60, Why: "the kubelet fields topologyManagerScope change", Cordoned: true}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	f.node = New(Options{Store: f.store, Target: f.target, Consumer: &wakes{}, Kubelet: f.node.kubelet, Drainer: d, Log: slog.New(slog.DiscardHandler)})
	if err := f.node.Recover(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.node.RunDrains(ctx) }()
	defer func() { cancel(); <-done }()
	recs := f.waitRecords(t, "the expired drain failed", func(r *nodeconfigv1.Records) bool { return r.GetDrain() == nil })
	if cordoned, _ := d.state(); cordoned || recs.GetError().GetError().GetReason() != records.ReasonDrainFailed ||
		!strings.Contains(recs.GetError().GetError().GetMessage(), "its bound of 60s passed while the agent was down") {
		t.Fatalf("cordoned %v, error %v; want the agent's cordon lifted and DrainFailed", cordoned, recs.GetError())
	}
}

// Two changes written before the kubelet restarts once (a rollback right
// after an activation, the agent busy meanwhile): the restart removes what
// either needed, and a removal already done is not asked again.
func TestTwoChangesBeforeOneRestartRemoveWhatEitherNeeds(t *testing.T) {
	prev := &nodeconfigv1.Disruption{Fields: []string{"cpuManagerPolicy"}, Remove: []string{disruption.CPUManagerState}}
	next := &nodeconfigv1.Disruption{Fields: []string{"maxPods", "memoryManagerPolicy"}, Remove: []string{disruption.MemoryManagerState}}
	got := unionDisruption(prev, next)
	if !slices.Equal(got.GetFields(), []string{"cpuManagerPolicy", "maxPods", "memoryManagerPolicy"}) ||
		!slices.Equal(got.GetRemove(), []string{disruption.CPUManagerState, disruption.MemoryManagerState}) {
		t.Fatalf("union %v", got)
	}
	prev.Removed = timestamppb.Now()
	if got := unionDisruption(prev, nil); !slices.Equal(got.GetRemove(), nil) || !slices.Equal(got.GetFields(), []string{"cpuManagerPolicy"}) {
		t.Fatalf("union with a removal done %v; want nothing left to remove", got)
	}
	if got := unionDisruption(&nodeconfigv1.Disruption{}, nil); got != nil {
		t.Fatalf("union of nothing %v", got)
	}
}
