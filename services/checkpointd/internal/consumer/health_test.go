package consumer

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// fakeHealth answers the gate with a set verdict and names ready pods,
// noting what the gate asked.
type fakeHealth struct {
	ready   []string
	verdict Verdict
	// readAt are the restarts counted when ReadyPods was asked.
	readAt  []int
	r       *countingRestarter
	judged  [][]string
	judgedN int
}

func (f *fakeHealth) ReadyPods() ([]string, error) {
	f.readAt = append(f.readAt, f.r.n)
	return f.ready, nil
}

func (f *fakeHealth) Judge(before []string, _ time.Time, _ *nodeconfigv1.HealthGates) Verdict {
	f.judged = append(f.judged, before)
	f.judgedN++
	return f.verdict
}

func trialRecords(phase nodeconfigv1.ConsumerPhase) *nodeconfigv1.Records {
	return &nodeconfigv1.Records{
		Assigned:      &nodeconfigv1.AssignedRecord{Source: src("2")},
		Active:        &nodeconfigv1.SourceRecord{Source: src("2"), WrittenAt: timestamppb.Now()},
		LastKnownGood: &nodeconfigv1.SourceRecord{Source: src("1")},
		Consumer:      &nodeconfigv1.ConsumerRecord{Source: src("2"), Phase: phase, Since: timestamppb.Now()},
	}
}

func TestGateNotesTheReadyPodsBeforeItRestartsAndJudgesAgainstThem(t *testing.T) {
	node := &fakeNode{recs: trialRecords(nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_RESTARTING)}
	g, r, healthy := newTestGate(t, node)
	h := &fakeHealth{ready: []string{"default/web/u1", "default/db/u2"}, r: r}
	g.Health = h
	failures := 0
	steps(g, 2, &failures)
	if !slices.Equal(h.readAt, []int{0}) {
		t.Fatalf("ready pods read at restarts %v; want once, before the restart", h.readAt)
	}
	if got := node.recs.GetConsumer().GetReadyBefore().GetPods(); !slices.Equal(got, h.ready) {
		t.Fatalf("recorded ready pods %v; want %v", got, h.ready)
	}
	healthy.Store(true)
	steps(g, 2, &failures)
	if phase(node) != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY || h.judgedN == 0 || !slices.Equal(h.judged[0], h.ready) {
		t.Fatalf("phase %s, judged %v; want HEALTHY, judged against the pods ready before", phase(node), h.judged)
	}
}

func TestGateRollsBackWhatAHealthGateFails(t *testing.T) {
	node := &fakeNode{recs: trialRecords(nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY)}
	g, r, healthy := newTestGate(t, node)
	healthy.Store(true)
	g.Health = &fakeHealth{r: r, verdict: Verdict{Failed: true, Message: "the Node's MemoryPressure is True: the node has memory pressure"}}
	failures := 0
	steps(g, 1, &failures)
	if len(node.rollbacks) != 0 {
		t.Fatalf("rolled back after one failed look of a threshold of two")
	}
	steps(g, 1, &failures)
	if len(node.rollbacks) != 1 || !records.SameSource(node.recs.GetActive().GetSource(), src("1")) {
		t.Fatalf("rollbacks %v active %v; want rolled back to last-known-good", node.rollbacks, node.recs.GetActive())
	}
	if e := node.recs.GetError().GetError(); e.GetReason() != records.ReasonHealthGateFailed || !strings.Contains(e.GetMessage(), "MemoryPressure is True") {
		t.Fatalf("late error %v; want %s with the evidence", e, records.ReasonHealthGateFailed)
	}
}

func TestGateHoldsTheSoakWhileAHealthGateCannotJudge(t *testing.T) {
	node := &fakeNode{recs: trialRecords(nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY)}
	g, r, healthy := newTestGate(t, node)
	healthy.Store(true)
	h := &fakeHealth{r: r, verdict: Verdict{Hold: true, Message: "the API server cannot be read"}}
	g.Health = h
	g.HealthTimeout = time.Minute
	failures := 0
	steps(g, 1, &failures)
	c := node.recs.GetConsumer()
	if c.GetPhase() != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING || !strings.HasPrefix(c.GetMessage(), gatesHold) || !records.SoakStart(node.recs).IsZero() {
		t.Fatalf("consumer %v; want WAITING on the gates' hold, the soak stopped", c)
	}
	c.Since = timestamppb.New(time.Now().Add(-time.Hour)) // far past the consumer's health timeout
	steps(g, 3, &failures)
	if len(node.rollbacks) != 0 || phase(node) != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING {
		t.Fatalf("rollbacks %v phase %s; a hold blames nothing, however long", node.rollbacks, phase(node))
	}
	h.verdict = Verdict{}
	steps(g, 1, &failures)
	if phase(node) != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY || records.SoakStart(node.recs).IsZero() {
		t.Fatalf("consumer %v once the gates pass; want HEALTHY, the soak going on", node.recs.GetConsumer())
	}
}

func TestGateDoesNotJudgeAProvenConfigByItsHealthGates(t *testing.T) {
	node := &fakeNode{recs: trialRecords(nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY)}
	node.recs.LastKnownGood = &nodeconfigv1.SourceRecord{Source: src("2")}
	g, r, healthy := newTestGate(t, node)
	healthy.Store(true)
	h := &fakeHealth{r: r, verdict: Verdict{Failed: true, Message: "pressure"}}
	g.Health = h
	failures := 0
	steps(g, 4, &failures)
	if len(node.rollbacks) != 0 || len(node.lkgRollbacks) != 0 || h.judgedN != 0 {
		t.Fatalf("rollbacks %v %v, judged %d times; a proven config is not judged again", node.rollbacks, node.lkgRollbacks, h.judgedN)
	}
}

// A kubelet that stops answering during a long hold gets its full health
// timeout from then, not from when the hold began: one failed probe is no
// rollback.
func TestAKubeletDownDuringALongHoldIsNotBlamedAtOnce(t *testing.T) {
	node := &fakeNode{recs: trialRecords(nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING)}
	node.recs.Consumer.Message = gatesHold + "the Prometheus query cannot be run"
	node.recs.Consumer.Since = timestamppb.New(time.Now().Add(-time.Hour))
	g, r, _ := newTestGate(t, node)
	g.HealthTimeout = time.Minute
	g.Health = &fakeHealth{r: r, verdict: Verdict{Hold: true, Message: "the Prometheus query cannot be run"}}
	failures := 0
	steps(g, 3, &failures)
	c := node.recs.GetConsumer()
	if len(node.rollbacks) != 0 || c.GetPhase() != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING || time.Since(c.GetSince().AsTime()) > time.Minute {
		t.Fatalf("rollbacks %v, consumer %v; want no rollback and the health timeout started afresh", node.rollbacks, c)
	}
}
