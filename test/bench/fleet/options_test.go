package main

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

func planOf(t *testing.T, args string) (plan, error) {
	t.Helper()
	var o options
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.register(fs)
	if err := fs.Parse(strings.Fields(args)); err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	return o.plan()
}

// The bench table (test/bench/benchtable) finds the fleet's rows by these
// names, as make bench and make fleet-bench run it.
func TestBenchNamesAreTheBenchTablesRows(t *testing.T) {
	for args, want := range map[string]string{
		"-nodes 1000":                                           "BenchmarkFleet/nodes=1000",
		"-nodes 1000 -tokens-due 60s":                           "BenchmarkFleet/nodes=1000/tokens-due",
		"-nodes 1000 -auth=false":                               "BenchmarkFleet/nodes=1000/noauth",
		"-nodes 5000 -select 0":                                 "BenchmarkFleet/nodes=5000",
		"-nodes 5000 -select 1000":                              "BenchmarkFleet/nodes=5000/selected=1000",
		"-nodes 5000 -failover":                                 "BenchmarkFleet/nodes=5000/failover",
		"-nodes 20 -cold-reviews=false":                         "BenchmarkFleet/nodes=20",
		"-nodes 10 -max-in-trial 10% -soak 1m":                  "BenchmarkFleet/nodes=10/max-in-trial=10%/soak=1m0s",
		"-nodes 10 -select 5 -idle-without-statusd -auth=false": "BenchmarkFleet/nodes=10/noauth/selected=5/idle-without-statusd",
	} {
		p, err := planOf(t, args)
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if got := p.benchName(); got != want {
			t.Errorf("%q: %s, want %s", args, got, want)
		}
	}
}

func TestPlanRefusesWhatCannotRun(t *testing.T) {
	for _, args := range []string{"-nodes 0", "-agents-per-process 0", "-tokens-due 60s -auth=false", "-tokens-due 30s", "-nodes 10 -select 11", "-select -1"} {
		if _, err := planOf(t, args); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

func TestPlanWorksOutWhatFollowsFromTheOptions(t *testing.T) {
	p, err := planOf(t, "-nodes 5000 -select 1000 -idle-without-statusd -tokens-due 2m")
	if err != nil {
		t.Fatal(err)
	}
	if p.n != 5000 || p.sel != 1000 || p.reporting != 1000 || !p.hosted {
		t.Errorf("n %d sel %d reporting %d hosted %v", p.n, p.sel, p.reporting, p.hosted)
	}
	if p.o.idle != 2*time.Minute+5*time.Second {
		t.Errorf("idle %v: the tokens' due time and 5 s more", p.o.idle)
	}
	if !slices.Contains(p.o.reconcilerFlags, "--agent-token-renew-after=2m0s") {
		t.Errorf("reconciler flags %q", p.o.reconcilerFlags)
	}
	if want := 5*time.Minute + defaultSoak; p.wait != want {
		t.Errorf("wait %v, want %v", p.wait, want)
	}
}

func TestStopAllUndoesTheLastStartedFirst(t *testing.T) {
	var r fleetRun
	var order []int
	for i := range 3 {
		r.onStop(func() { order = append(order, i) })
	}
	r.stopAll()
	if !slices.Equal(order, []int{2, 1, 0}) {
		t.Errorf("stopped in the order %v", order)
	}
}
