package consumer

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// Node is what the gate needs of the node's lifecycle.
type Node interface {
	Records() (*nodeconfigv1.Records, error)
	// SetConsumer records the consumer's phase on src; it changes nothing
	// and returns false when src is no longer the active config.
	SetConsumer(src *nodeconfigv1.ConfigSource, phase nodeconfigv1.ConsumerPhase, message string) (bool, error)
	// RollBack makes last-known-good active after the consumer failed on
	// src, a late error; false when src is no longer active or is itself
	// last-known-good (there is nothing better to go back to).
	RollBack(src *nodeconfigv1.ConfigSource, message string) (bool, error)
}

// Gate restarts the consumer whenever the active config changes, waits for
// it to become healthy, and watches it through the soak: the records say
// where it is (RESTARTING, WAITING, HEALTHY, UNHEALTHY), durably, so an
// agent that dies mid-restart finishes the job when it starts again.
type Gate struct {
	Node      Node
	Restarter Restarter
	Prober    Prober
	// HealthTimeout is how long a restarted consumer has to become healthy.
	HealthTimeout time.Duration
	// Period is how often it is probed.
	Period time.Duration
	// FailureThreshold failed probes in a row make a healthy consumer unhealthy.
	FailureThreshold int
	// CrashLoopThreshold new processes of a consumer that is not yet healthy
	// make it crash-looping before HealthTimeout (where the restarter can
	// tell its process: Instances).
	CrashLoopThreshold int
	// LogFile, when set, is the consumer's own log: its last error line
	// goes into the message of a failure (the kubelet's exit line).
	LogFile string
	Log     *slog.Logger

	wake chan struct{}
	// seen are the consumer's processes seen while waiting for its health.
	seen []string
}

// waitingPoll is how often a restarted consumer is looked at until it is
// healthy: a kubelet that exits on its config lives for a fraction of its
// babysitter's one-second restart delay, often shorter than 200 ms, and a
// crash loop is only seen in the processes a look catches running. The
// looks stop once the consumer is healthy.
const waitingPoll = 50 * time.Millisecond

// Instances is a restarter that can tell which process of the consumer runs
// ("" for none): a kubelet that exits on its config is started again and
// again by its babysitter, each time a new process.
type Instances interface {
	Instance() (string, error)
}

// Wake makes the gate look at the records now (after the file changed).
func (g *Gate) Wake() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// Run drives the consumer until ctx ends (a gate from NewGate).
func (g *Gate) Run(ctx context.Context) {
	failures := 0
	for {
		wait := g.step(ctx, &failures)
		select {
		case <-ctx.Done():
			return
		case <-g.wake:
		case <-time.After(wait):
		}
	}
}

// NewGate returns a gate ready to be woken before Run starts.
func NewGate(g Gate) *Gate {
	g.wake = make(chan struct{}, 1)
	if g.Period <= 0 {
		g.Period = 5 * time.Second
	}
	if g.FailureThreshold <= 0 {
		g.FailureThreshold = 3
	}
	if g.CrashLoopThreshold <= 0 {
		g.CrashLoopThreshold = 3
	}
	if g.Log == nil {
		g.Log = slog.Default()
	}
	return &g
}

// step does one thing the records call for and says when to look again.
func (g *Gate) step(ctx context.Context, failures *int) time.Duration {
	recs, err := g.Node.Records()
	if err != nil {
		g.Log.Error("consumer gate: read records", "err", err)
		return g.Period
	}
	active := recs.GetActive().GetSource()
	c := recs.GetConsumer()
	if c == nil || !nodeconfigv1.SameSource(c.GetSource(), active) {
		// Nothing recorded for this active config (the gate was just turned
		// on): a node that never had a config runs its local default and
		// only needs watching; otherwise the consumer may run an older file,
		// so it is restarted.
		phase := nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_RESTARTING
		if active == nil {
			phase = nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING
		}
		if ok, err := g.Node.SetConsumer(active, phase, ""); err != nil || !ok {
			return g.retry(err)
		}
		return 0
	}
	switch c.GetPhase() {
	case nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_RESTARTING:
		*failures = 0
		g.seen = nil
		g.Log.Info("restarting the consumer onto the active config", "restarter", g.Restarter.String(), "active", active.Describe())
		if err := g.Restarter.Restart(ctx); err != nil {
			g.Log.Error("restart the consumer", "err", err)
			_, _ = g.Node.SetConsumer(active, nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_RESTARTING, "restart failed, retrying: "+err.Error())
			return g.Period
		}
		_, err := g.Node.SetConsumer(active, nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING, "")
		return g.retry(err)
	case nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING:
		healthy, detail := g.Prober.Probe(ctx)
		if !healthy && g.crashLooping() {
			g.fail(active, fmt.Sprintf("the consumer is crash-looping on %s: %d processes since its restart, none healthy: %s", active.Describe(), len(g.seen), detail))
			g.seen = nil
			return 0
		}
		if healthy {
			g.seen = nil
			_, err := g.Node.SetConsumer(active, nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY, detail)
			return g.retry(err)
		}
		if since := c.GetSince().AsTime(); time.Since(since) > g.HealthTimeout {
			g.fail(active, fmt.Sprintf("the consumer did not become healthy within %s of its restart onto %s: %s", g.HealthTimeout, active.Describe(), detail))
			return 0
		}
		// Often enough to see each short-lived process of a crash loop.
		return waitingPoll
	case nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY:
		healthy, detail := g.Prober.Probe(ctx)
		if healthy {
			*failures = 0
			return g.Period
		}
		*failures++
		g.Log.Warn("consumer probe failed", "failures", *failures, "detail", detail)
		if *failures >= g.FailureThreshold {
			*failures = 0
			g.fail(active, fmt.Sprintf("the consumer turned unhealthy on %s (%d failed probes in a row): %s", active.Describe(), g.FailureThreshold, detail))
			return 0
		}
		return time.Second
	case nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_UNHEALTHY:
		if healthy, detail := g.Prober.Probe(ctx); healthy {
			_, err := g.Node.SetConsumer(active, nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY, detail)
			return g.retry(err)
		}
		return g.Period
	}
	return g.Period
}

// crashLooping notes the consumer's current process and reports whether
// CrashLoopThreshold of them came and went while it was not healthy.
func (g *Gate) crashLooping() bool {
	in, ok := g.Restarter.(Instances)
	if !ok {
		return false
	}
	id, err := in.Instance()
	if err != nil || id == "" || (len(g.seen) > 0 && g.seen[len(g.seen)-1] == id) {
		return false
	}
	g.seen = append(g.seen, id)
	return len(g.seen) >= g.CrashLoopThreshold
}

// fail rolls back a config the consumer does not run healthy; when there is
// nothing to go back to, the consumer is recorded unhealthy and watched.
func (g *Gate) fail(active *nodeconfigv1.ConfigSource, message string) {
	if said := LastErrorLine(g.LogFile); said != "" {
		message += "; the consumer said: " + said
	}
	rolled, err := g.Node.RollBack(active, message)
	if err != nil {
		g.Log.Error("roll back after the consumer failed", "err", err)
		return
	}
	if rolled {
		g.Log.Warn("rolled back: the consumer is not healthy on the active config", "message", message)
		return
	}
	g.Log.Error("the consumer is not healthy on last-known-good either", "message", message)
	_, _ = g.Node.SetConsumer(active, nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_UNHEALTHY, message)
}

func (g *Gate) retry(err error) time.Duration {
	if err != nil {
		g.Log.Error("consumer gate: write records", "err", err)
		return g.Period
	}
	return 0
}
