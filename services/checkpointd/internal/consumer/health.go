package consumer

import (
	"fmt"
	"time"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// Health judges what a config on trial does to the node beyond the
// consumer's own probe: a kubelet can answer its healthz while its config
// puts the node under pressure or leaves the node's pods not Ready.
type Health interface {
	// ReadyPods names the node's pods that are Running and Ready now
	// ("namespace/name/uid"); an error where it cannot tell.
	ReadyPods() ([]string, error)
	// Judge says whether the node is healthy now, against the pods that
	// were ready before the trial (nil: not known, so not judged), when
	// the consumer was restarted onto it, and the trial's own gates (nil:
	// the default alone).
	Judge(readyBefore []string, restarted time.Time, gates *nodeconfigv1.HealthGates) Verdict
}

// Verdict is a health gate's word on the node at one look.
type Verdict struct {
	// Hold: nothing can be said yet (the API server cannot be read, pods
	// are still coming back): the soak stops, and nothing is blamed.
	Hold bool
	// Failed: the node is not healthy on the config, with the evidence in
	// Message.
	Failed  bool
	Message string
}

// gatesHold begins the message of a WAITING consumer whose soak a health
// gate holds.
const gatesHold = records.HealthGatesHold

// judge asks the health gates about the node while the config soaks; a
// pass where there are none.
func (g *Gate) judge(recs *nodeconfigv1.Records) Verdict {
	if g.Health == nil || !records.Soaking(recs) {
		return Verdict{}
	}
	c := recs.GetConsumer()
	var before []string
	// When the file was written: fixed for the trial (a phase's since
	// moves with every hold), and no later than the kubelet's restart.
	restarted := recs.GetActive().GetWrittenAt().AsTime()
	if rb := c.GetReadyBefore(); rb != nil {
		before = rb.GetPods()
		if before == nil {
			before = []string{}
		}
		restarted = rb.GetTaken().AsTime()
	}
	return g.Health.Judge(before, restarted, recs.GetAssigned().GetHealth())
}

// takeReadyPods records, before the consumer is restarted onto a config on
// trial, which of the node's pods are ready: the pods the trial must not
// break. Where they cannot be read, the trial goes on without them.
func (g *Gate) takeReadyPods(active *nodeconfigv1.ConfigSource, recs *nodeconfigv1.Records) {
	if g.Health == nil || !records.Soaking(recs) || recs.GetConsumer().GetReadyBefore() != nil {
		return
	}
	pods, err := g.Health.ReadyPods()
	if err != nil {
		g.Log.Warn("the node's ready pods cannot be read before the restart: the trial does not judge them", "err", err)
		return
	}
	if pods == nil {
		pods = []string{}
	}
	if _, err := g.Lifecycle.SetReadyBefore(active, pods); err != nil {
		g.Log.Error("consumer gate: write records", "err", err)
	}
}

// onVerdict acts on the health gates' verdict about a consumer that answers
// healthy on a config on trial, in phase (HEALTHY, or WAITING on a hold):
// fail after FailureThreshold failed looks in a row, hold the soak, or let
// it run (HEALTHY again). It says when to look again.
func (g *Gate) onVerdict(active *nodeconfigv1.ConfigSource, phase nodeconfigv1.ConsumerPhase, v Verdict, detail string) time.Duration {
	switch {
	case v.Failed:
		g.gateFailures++
		g.Log.Warn("health gate failed", "failures", g.gateFailures, "detail", v.Message)
		if g.gateFailures < g.FailureThreshold {
			return time.Second
		}
		g.gateFailures = 0
		g.failHealth(active, fmt.Sprintf("a health gate failed on %s (%d looks in a row): %s", records.Describe(active), g.FailureThreshold, v.Message))
		return 0
	case v.Hold:
		g.gateFailures = 0
		_, err := g.Lifecycle.SetConsumer(active, nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING, gatesHold+v.Message)
		if err != nil {
			return g.retry(err)
		}
		return g.Period
	}
	g.gateFailures = 0
	if phase != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY {
		_, err := g.Lifecycle.SetConsumer(active, nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY, detail)
		return g.retry(err)
	}
	return -1
}

// failHealth rolls back a config a health gate failed; the consumer itself
// is healthy, so its log says nothing of it.
func (g *Gate) failHealth(active *nodeconfigv1.ConfigSource, message string) {
	if rolled, err := g.rollBack(active, records.ReasonHealthGateFailed, message); err == nil && !rolled {
		// Nothing better to go back to: the node stays, watched as a
		// proven config is.
		g.Log.Error("a health gate failed on a config with nothing to roll back to", "message", message)
	}
}
