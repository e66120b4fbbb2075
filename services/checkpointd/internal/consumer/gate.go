package consumer

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// Lifecycle is what the gate needs of the node's lifecycle.
type Lifecycle interface {
	Records() (*nodeconfigv1.Records, error)
	// SetConsumer records the consumer's phase on src; it changes nothing
	// and returns false when src is no longer the active config.
	SetConsumer(src *nodeconfigv1.ConfigSource, phase nodeconfigv1.ConsumerPhase, message string) (bool, error)
	// RollBack makes last-known-good active after the consumer failed on
	// src, a late error of reason (records.ReasonConsumerUnhealthy, or
	// records.ReasonHealthGateFailed); false when src is no longer active
	// or is itself last-known-good (there is nothing better to go back to).
	RollBack(src *nodeconfigv1.ConfigSource, reason, message string) (bool, error)
	// SeenHealthy records that the consumer was seen healthy on src, the
	// active config, in its HEALTHY phase.
	SeenHealthy(src *nodeconfigv1.ConfigSource) error
	// SetReadyBefore records the pods that were ready before the consumer
	// was restarted onto src, once per trial.
	SetReadyBefore(src *nodeconfigv1.ConfigSource, pods []string) (bool, error)
	// StateFilesRemoved records that the state files the restart onto src
	// removes are gone.
	StateFilesRemoved(src *nodeconfigv1.ConfigSource) (bool, error)
}

// Gate restarts the consumer whenever the active config changes, waits for
// it to become healthy, and watches it through the soak: the records say
// where it is (RESTARTING, WAITING, HEALTHY, UNHEALTHY), durably, so an
// agent that dies mid-restart finishes the job when it starts again.
//
// It blames the config only for what the config did: a consumer that exits
// again and again, never turns healthy, or whose same process fails its
// probes. A consumer restarted or stopped by something else, or one without
// a ready container runtime, is waited for: WAITING stops the soak, which
// starts over once the consumer is healthy again.
type Gate struct {
	Lifecycle Lifecycle
	Restarter Restarter
	Prober    Prober
	// Runtime, when set, is asked before the config is blamed: while it is
	// not ready the gate holds, and the consumer's time starts over once it
	// is.
	Runtime Runtime
	// Health, when set, judges the node through the soak beyond the
	// consumer's probe (its conditions, its pods): a failure rolls the
	// config back, and where it cannot judge the soak holds.
	Health Health
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
	// KubeletRootDir is the kubelet's root directory (its --root-dir) as
	// mounted: the state files a change refuses are removed there.
	KubeletRootDir string
	Log            *slog.Logger

	wake chan struct{}
	// seen are the consumer's processes seen while waiting for its health.
	seen []string
	// healthy is the process that turned healthy (where the restarter tells
	// it), or the first one seen failing after the agent started: only its
	// failed probes count; another one was restarted by someone else.
	healthy string
	// started is set by the first step: the records it reads were written
	// before this agent ran.
	started bool
	// seenWritten is when the consumer was last written down as seen healthy.
	seenWritten time.Time
	// gateFailures are the health gates' failed looks in a row.
	gateFailures int
}

// Messages of a WAITING consumer that the gate reads back, so that an agent
// that starts again holds as the one before it did.
const (
	runtimeNotReady = "the container runtime is not ready: "
	stoppedOutside  = "the kubelet was stopped by something else"
)

// waitingPoll is how often a restarted consumer is looked at until it is
// healthy: a kubelet that exits on its config lives for a fraction of its
// babysitter's one-second restart delay, often shorter than 200 ms, and a
// crash loop is only seen in the processes a look catches running. The
// looks stop once the consumer is healthy.
const waitingPoll = 50 * time.Millisecond

// Instances is a restarter that can tell which process of the consumer runs
// ("" for none): a kubelet that exits on its config is started again and
// again by its babysitter, each time a new process; and a new process during
// the soak was restarted by someone else, not failed by its config.
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
	if g.HealthTimeout <= 0 {
		g.HealthTimeout = 2 * time.Minute
	}
	return &g
}

// step does one thing the records call for and says when to look again.
func (g *Gate) step(ctx context.Context, failures *int) time.Duration {
	recs, err := g.Lifecycle.Records()
	if err != nil {
		g.Log.Error("consumer gate: read records", "err", err)
		return g.Period
	}
	active := recs.GetActive().GetSource()
	c := recs.GetConsumer()
	if c == nil || !records.SameSource(c.GetSource(), active) {
		// Nothing recorded for this active config (the gate was just turned
		// on): a node that never had a config runs its local default and
		// only needs watching; otherwise the consumer may run an older file,
		// so it is restarted.
		phase := nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_RESTARTING
		if active == nil || g.startedAfter(recs.GetActive().GetWrittenAt().AsTime()) {
			// A kubelet that started after the file was written runs it:
			// turning the gate on restarts no kubelet outside its window.
			phase = nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING
		}
		if ok, err := g.Lifecycle.SetConsumer(active, phase, ""); err != nil || !ok {
			return g.retry(err)
		}
		return 0
	}
	if !g.started {
		g.started = true
		if c.GetPhase() == nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY && records.Soaking(recs) {
			// The node or the agent was down for a while nobody watched: the
			// soak keeps what was seen healthy and goes on once it is again.
			_, err := g.Lifecycle.SetConsumer(active, nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING, "the agent started: the soak goes on once the consumer is seen healthy again")
			return g.retry(err)
		}
	}
	switch c.GetPhase() {
	case nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_RESTARTING:
		*failures = 0
		g.seen = nil
		g.healthy = ""
		g.gateFailures = 0
		g.takeReadyPods(active, recs)
		g.Log.Info("restarting the consumer onto the active config", "restarter", g.Restarter.String(), "active", records.Describe(active), "fields", c.GetDisruption().GetFields())
		var between func() error
		if d := c.GetDisruption(); len(d.GetRemove()) > 0 && d.GetRemoved() == nil {
			between = g.removeStateFiles(active, d.GetRemove())
		}
		if err := g.restart(ctx, between); err != nil {
			g.Log.Error("restart the consumer", "err", err)
			_, _ = g.Lifecycle.SetConsumer(active, nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_RESTARTING, "restart failed, retrying: "+err.Error())
			return g.Period
		}
		_, err := g.Lifecycle.SetConsumer(active, nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING, "")
		return g.retry(err)
	case nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING:
		healthy, detail := g.Prober.Probe(ctx)
		if healthy {
			g.seen = nil
			g.healthy, _ = g.instance()
			// The health gates may hold the soak from its start: pods are
			// Ready again a while after the kubelet is.
			return g.onVerdict(active, c.GetPhase(), g.judge(recs), detail)
		}
		switch msg := c.GetMessage(); {
		case strings.HasPrefix(msg, gatesHold):
			// A hold may last long: the kubelet's health timeout starts
			// when it stops answering, not when the hold began.
			g.seen = nil
			_, err := g.Lifecycle.SetConsumer(active, nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING, "the kubelet stopped answering while the health gates held the soak: waiting for its health ("+detail+")")
			return g.retry(err)
		case strings.HasPrefix(msg, runtimeNotReady):
			return g.awaitRuntime(ctx, active)
		case strings.HasPrefix(msg, stoppedOutside):
			// Its health timeout starts when it runs again: a package upgrade
			// may keep it stopped for longer.
			id, known := g.instance()
			if known && id == "" {
				return waitingPoll
			}
			if known {
				g.seen = nil
				_, err := g.Lifecycle.SetConsumer(active, nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING, fmt.Sprintf("the kubelet runs again (process %s) after something else stopped it: waiting for its health", id))
				return g.retry(err)
			}
		}
		crashing := g.crashLooping()
		timedOut := time.Since(c.GetSince().AsTime()) > g.HealthTimeout
		if !crashing && !timedOut {
			// Often enough to see each short-lived process of a crash loop.
			return waitingPoll
		}
		if g.waitsForRuntime(ctx, active) {
			return g.Period
		}
		if crashing {
			g.fail(active, fmt.Sprintf("the consumer is crash-looping on %s: %d processes since its restart, none healthy: %s", records.Describe(active), len(g.seen), detail))
			g.seen = nil
			return 0
		}
		g.fail(active, fmt.Sprintf("the consumer did not become healthy within %s of its restart onto %s: %s", g.HealthTimeout, records.Describe(active), detail))
		return 0
	case nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY:
		healthy, detail := g.Prober.Probe(ctx)
		if healthy {
			*failures = 0
			if g.healthy == "" {
				g.healthy, _ = g.instance()
			}
			if wait := g.onVerdict(active, c.GetPhase(), g.judge(recs), detail); wait >= 0 {
				return wait
			}
			g.noteSeenHealthy(active, recs)
			return g.Period
		}
		// Only failed probes of the same process count. Where the restarter
		// cannot tell its process, or never named one, every one does.
		if id, known := g.instance(); known {
			if g.healthy != "" && id != g.healthy {
				*failures = 0
				return g.restartedOutside(active, id)
			}
			if id != "" {
				g.healthy = id
			}
		}
		*failures++
		g.Log.Warn("consumer probe failed", "failures", *failures, "detail", detail)
		if *failures >= g.FailureThreshold {
			*failures = 0
			if g.waitsForRuntime(ctx, active) {
				return g.Period
			}
			msg := fmt.Sprintf("the consumer turned unhealthy on %s (%d failed probes in a row): %s", records.Describe(active), g.FailureThreshold, detail)
			if !records.Soaking(recs) {
				// A config proven through its soak is not judged again by a
				// later outage of a kubelet that ran it: only one that will
				// not run it after a restart onto it gives it up.
				g.Log.Error("the consumer is not healthy on its proven config", "message", msg)
				_, err := g.Lifecycle.SetConsumer(active, nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_UNHEALTHY, msg)
				return g.retry(err)
			}
			g.fail(active, msg)
			return 0
		}
		return time.Second
	case nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_UNHEALTHY:
		if healthy, detail := g.Prober.Probe(ctx); healthy {
			g.healthy, _ = g.instance()
			_, err := g.Lifecycle.SetConsumer(active, nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY, detail)
			return g.retry(err)
		}
		return g.Period
	}
	return g.Period
}

// seenHealthyEvery is how often a soaking consumer's health is written down:
// what a crash or a reboot loses of the soak at most.
const seenHealthyEvery = 15 * time.Second

// noteSeenHealthy writes down, every seenHealthyEvery while the config
// soaks, that the consumer was seen healthy on it.
func (g *Gate) noteSeenHealthy(active *nodeconfigv1.ConfigSource, recs *nodeconfigv1.Records) {
	if !records.Soaking(recs) || (!g.seenWritten.IsZero() && time.Since(g.seenWritten) < seenHealthyEvery) {
		return
	}
	if err := g.Lifecycle.SeenHealthy(active); err != nil {
		g.Log.Error("consumer gate: write records", "err", err)
		return
	}
	g.seenWritten = time.Now()
}

// restart restarts the consumer within HealthTimeout (a hung systemd job or
// a process that ignores SIGTERM is retried, not waited on), running
// between (nil: nothing) while none runs, and checks that the process it
// restarts is the one that answers the health check.
func (g *Gate) restart(ctx context.Context, between func() error) error {
	rctx, cancel := context.WithTimeout(ctx, g.HealthTimeout)
	defer cancel()
	var err error
	switch b, ok := g.Restarter.(Between); {
	case between == nil:
		err = g.Restarter.Restart(rctx)
	case ok:
		err = b.RestartBetween(rctx, between)
	default:
		// A restarter that cannot wait between: before, then, racing the
		// old consumer's last writes.
		if err = between(); err == nil {
			err = g.Restarter.Restart(rctx)
		}
	}
	if err != nil {
		return err
	}
	named, ok := g.Restarter.(NamedProcess)
	if !ok || named.Identity() == "" {
		return nil
	}
	if id, known := g.instance(); known && id == "" {
		if healthy, _ := g.Prober.Probe(ctx); healthy {
			return fmt.Errorf("no process runs %s, yet %s answers healthy: the consumer is not what the agent restarts (a kubelet in another cgroup, or inside another binary, as in k3s or RKE2), so it cannot have read the file; set --consumer-cgroup and --consumer-exe-path, or --consumer-pid-file, to the process that reads it", named.Identity(), g.Prober.URL)
		}
	}
	return nil
}

// NamedProcess is a restarter that finds the consumer by what it runs (not
// a pid file): one that finds none while the health check answers
// restarted nothing.
type NamedProcess interface {
	// Identity says what it looks for, "" where a pid file names it.
	Identity() string
}

// StartTimes is a restarter that can tell when the consumer's running
// process started (an error, or the zero time, when none runs).
type StartTimes interface {
	StartTime() (time.Time, error)
}

// startedAfter says whether the consumer's running process started after t.
func (g *Gate) startedAfter(t time.Time) bool {
	st, ok := g.Restarter.(StartTimes)
	if !ok || t.IsZero() {
		return false
	}
	started, err := st.StartTime()
	return err == nil && !started.IsZero() && started.After(t)
}

// instance is the consumer's running process ("" for none); known is false
// where the restarter cannot tell (systemd, none) or failed to.
func (g *Gate) instance() (id string, known bool) {
	in, ok := g.Restarter.(Instances)
	if !ok {
		return "", false
	}
	id, err := in.Instance()
	if err != nil {
		return "", false
	}
	return id, true
}

// restartedOutside takes a consumer whose healthy process is gone back to
// waiting for its health, blaming nothing: something else restarted or
// stopped it. WAITING stops the soak; it starts over once it is healthy.
func (g *Gate) restartedOutside(active *nodeconfigv1.ConfigSource, id string) time.Duration {
	gone := g.healthy
	g.healthy = ""
	g.seen = nil
	msg := fmt.Sprintf("the kubelet was restarted by something else, not by this agent (process %s is gone, %s runs): not the config's fault; the soak waits until it is healthy again", gone, id)
	if id == "" {
		msg = fmt.Sprintf("%s, not by this agent (process %s is gone, none runs): not the config's fault; its health timeout starts when it runs again", stoppedOutside, gone)
	}
	g.Log.Warn(msg)
	_, err := g.Lifecycle.SetConsumer(active, nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING, msg)
	return g.retry(err)
}

// waitsForRuntime asks the container runtime before the config is blamed:
// when it is not ready, the consumer waits for it instead (WAITING stops the
// soak) and nothing is blamed.
func (g *Gate) waitsForRuntime(ctx context.Context, active *nodeconfigv1.ConfigSource) bool {
	if g.Runtime == nil {
		return false
	}
	ready, detail := g.Runtime.Ready(ctx)
	if ready {
		return false
	}
	if ctx.Err() != nil {
		// The agent is stopping, not the runtime: blame and write nothing.
		return true
	}
	g.seen = nil
	g.Log.Warn("not blaming the config: the container runtime is not ready", "detail", detail)
	if _, err := g.Lifecycle.SetConsumer(active, nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING, runtimeNotReady+detail); err != nil {
		g.Log.Error("consumer gate: write records", "err", err)
	}
	return true
}

// awaitRuntime holds a consumer while the container runtime is not ready.
// Once it is, a new message restarts the WAITING clock: the consumer gets
// its full health timeout and a fresh crash-loop count.
func (g *Gate) awaitRuntime(ctx context.Context, active *nodeconfigv1.ConfigSource) time.Duration {
	g.seen = nil
	if g.Runtime != nil {
		if ready, detail := g.Runtime.Ready(ctx); !ready {
			if ctx.Err() != nil {
				return g.Period
			}
			if _, err := g.Lifecycle.SetConsumer(active, nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING, runtimeNotReady+detail); err != nil {
				g.Log.Error("consumer gate: write records", "err", err)
			}
			return g.Period
		}
	}
	g.Log.Info("the container runtime is ready again: the consumer's health timeout starts over")
	_, err := g.Lifecycle.SetConsumer(active, nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING, "the container runtime is ready again: waiting for the consumer's health")
	return g.retry(err)
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
	if rolled, err := g.rollBack(active, records.ReasonConsumerUnhealthy, message); err != nil || rolled {
		return
	}
	g.Log.Error("the consumer is not healthy on last-known-good either", "message", message)
	_, _ = g.Lifecycle.SetConsumer(active, nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_UNHEALTHY, message)
}

// rollBack rolls active back as a late error of reason, and logs what came
// of it; rolled is false where active was already last-known-good.
func (g *Gate) rollBack(active *nodeconfigv1.ConfigSource, reason, message string) (rolled bool, err error) {
	rolled, err = g.Lifecycle.RollBack(active, reason, message)
	switch {
	case err != nil:
		g.Log.Error("roll back the active config", "reason", reason, "err", err)
	case rolled:
		g.Log.Warn("rolled back the active config", "reason", reason, "message", message)
	}
	return rolled, err
}

func (g *Gate) retry(err error) time.Duration {
	if err != nil {
		g.Log.Error("consumer gate: write records", "err", err)
		return g.Period
	}
	return 0
}
