package lifecycle

import (
	"path/filepath"
	"testing"
	"time"

	"nodeconfig.io/proto/nodeconfig/records"
	"nodeconfig.io/services/checkpointd/internal/guard"
)

// guarded gives the fixture's node a start guard's directory.
func guarded(t *testing.T) (*fixture, string) {
	t.Helper()
	f := newFixture(t)
	dir := filepath.Join(f.dir, "guard")
	f.node = New(Options{Store: f.store, Target: f.target, Guard: &guard.Writer{Dir: dir, NoSync: true}})
	return f, dir
}

// The agent keeps the guard's trial in step with its records: a trial
// while a config soaks, with last-known-good's bytes, none once promoted.
func TestTheGuardsTrialFollowsTheRecords(t *testing.T) {
	f, dir := guarded(t)
	f.assign(t, "1", "a: 1\n")
	f.promote(t, "1")
	f.assign(t, "2", "a: 2\n")
	// A crash loop on version 2 with no agent to see it: the guard falls
	// back at the fourth start.
	var out guard.Outcome
	for range 4 {
		out = guard.Check(dir, time.Now())
	}
	if got, _ := f.targetContent(t); got != "a: 1\n" {
		t.Fatalf("after four starts under the trial the drop-in holds %q (guard: %+v); want last-known-good", got, out)
	}
	// The agent starts again: it records the fallback as a late error and
	// never writes version 2 back.
	f.node = New(Options{Store: f.store, Target: f.target, Guard: &guard.Writer{Dir: dir, NoSync: true}})
	if err := f.node.Recover(); err != nil {
		t.Fatal(err)
	}
	recs := f.records(t)
	if !records.SameSource(recs.GetActive().GetSource(), src("1")) || recs.GetError().GetError().GetReason() != records.ReasonStartGuardFellBack {
		t.Fatalf("records %v; want last-known-good active and the guard's late error", recs)
	}
	if got, _ := f.targetContent(t); got != "a: 1\n" {
		t.Fatalf("after the agent's start the drop-in holds %q; want last-known-good", got)
	}
	if fb, err := guard.ReadFallback(dir); err != nil || fb != nil {
		t.Fatalf("fallback record %v, %v after the agent recorded it; want none", fb, err)
	}
	// A good version promoted: no trial, so no start falls back.
	f.assign(t, "3", "a: 3\n")
	f.promote(t, "3")
	for range 6 {
		guard.Check(dir, time.Now())
	}
	if got, _ := f.targetContent(t); got != "a: 3\n" {
		t.Fatalf("with version 3 promoted the drop-in holds %q; want it", got)
	}
}

// The guard falls back while the agent runs (quick restarts its probes did
// not see): neither a drift repair nor a promotion undoes it, and the
// fallback is recorded at once.
func TestAFallbackWhileTheAgentRunsIsNeverUndone(t *testing.T) {
	for name, after := range map[string]func(f *fixture) error{
		"drift repair": func(f *fixture) error { _, err := f.node.RepairDrift(); return err },
		"promotion": func(f *fixture) error {
			f.advance(time.Hour)
			_, err := f.node.Promote(src("2"))
			return err
		},
		"seen healthy": func(f *fixture) error { return (ConsumerNode{f.node}).SeenHealthy(src("2")) },
	} {
		t.Run(name, func(t *testing.T) {
			f, dir := guarded(t)
			f.assign(t, "1", "a: 1\n")
			f.promote(t, "1")
			f.assign(t, "2", "a: 2\n")
			for range 4 {
				guard.Check(dir, time.Now())
			}
			_ = after(f)
			if got, _ := f.targetContent(t); got != "a: 1\n" {
				t.Fatalf("the drop-in holds %q after the %s; want the guard's last-known-good kept", got, name)
			}
			recs := f.records(t)
			if !records.SameSource(recs.GetActive().GetSource(), src("1")) || !records.SameSource(recs.GetLastKnownGood().GetSource(), src("1")) || recs.GetError().GetError().GetReason() != records.ReasonStartGuardFellBack {
				t.Fatalf("records %v after the %s; want last-known-good 1 active and kept, and the guard's late error", recs, name)
			}
		})
	}
}
