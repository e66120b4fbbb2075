package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// allMet is benchmark output in which every figure meets its target.
const allMet = `goos: linux
goarch: amd64
BenchmarkPutCheckpoint64KiB-2          	     100	   5123456 ns/op	         1.21 ratio-to-floor
BenchmarkPutCheckpointConcurrent-2     	       3	 90000000 ns/op	         4.50 speedup
BenchmarkPutCheckpointConcurrent-2     	       3	 90000000 ns/op	         3.40 speedup
BenchmarkPutCheckpointConcurrent-2     	       3	 90000000 ns/op	         3.90 speedup
BenchmarkPutCheckpointConcurrent-2     	       3	 90000000 ns/op	         3.10 speedup
BenchmarkPutCheckpointConcurrent-2     	       3	 90000000 ns/op	         4.00 speedup
BenchmarkBurstCoalescing-2             	       5	 130000000 ns/op	        28.00 ms-after-last-change	         1.000 patches/burst
BenchmarkAssignmentLatency-2           	       1	2000000000 ns/op	        41.00 p50-ms	        95.00 p99-ms
BenchmarkWritesPerNodePerConfigChange-2	       1	3000000000 ns/op	         2.00 writes/node/change
BenchmarkSteadyStateWritesPerNodePerHour-2	   1	3000000000 ns/op	         0 writes/node/hour
BenchmarkFleet/nodes=1000-2            	       1	60000000000 ns/op	         7.50 all-active-s	        80.00 reconciler-peak-rss-MiB	         2.10 writes/node/change	         7.50 s-per-1000-nodes	         7.88 control-plane-cpu-ms/node
BenchmarkFleet/nodes=1000/kubelet-like-nodes-2	       1	 9000000000 ns/op	         9.00 all-active-s	         4.90 control-plane-cpu-ms/node	        12.80 etcd-log-kB/node
BenchmarkFleet/nodes=1000/tokens-due-2 	       1	 3200000000 ns/op	         3.20 all-active-s	         3.10 cpu-floor-s	         2.10 agents-cpu-s	         4.10 control-plane-cpu-s
BenchmarkFleet/nodes=5000-2            	       1	12000000000 ns/op	        12.00 all-active-s	        40.00 first-rollout-s	        95.00 reconciler-peak-rss-MiB	         2.07 writes/node/change	      2000 api-writes/s	         2.50 floor-s	         4.80 ratio-to-floor	         2.40 s-per-1000-nodes	         1.50 first-rollout-x-change	         1.05 ratio-to-cpu-floor	        10.00 control-plane-cpu-floor-s
BenchmarkFleetFailover/nodes=5000-2	       1	15000000000 ns/op	        15.00 failover-s	         1.25 failover-x-change	        12.00 change-s	         3.00 lease-wait-s
BenchmarkFleet/nodes=5000/selected=1000-2	       1	 4000000000 ns/op	         4.00 all-active-s	         4.00 s-per-1000-nodes
BenchmarkFleet/nodes=10000-2           	       1	30000000000 ns/op	        30.00 all-active-s	        80.00 first-rollout-s	        99.00 reconciler-peak-rss-MiB	         2.07 writes/node/change	         3.00 s-per-1000-nodes
BenchmarkKubeletRunsNewConfig-2     	      20	 996000936 ns/op	      1472 to-kubelet-running-p50-ms	      1510 to-kubelet-running-p99-ms
BenchmarkBadConfigToHealthyLastKnownGood-2     	      10	 996000936 ns/op	      5000 to-healthy-lkg-p50-ms	      6000 to-healthy-lkg-p99-ms
PASS
`

// oneMissed is allMet with the assignment latency's p99 over its 300 ms.
var oneMissed = strings.Replace(allMet, "95.00 p99-ms", "450.00 p99-ms", 1)

func TestTableMeetingEveryTargetMissesNothing(t *testing.T) {
	var out bytes.Buffer
	missed, err := table(strings.NewReader(allMet), &out)
	if err != nil {
		t.Fatal(err)
	}
	if len(missed) != 0 {
		t.Fatalf("missed %q in output meeting every target:\n%s", missed, out.String())
	}
	if got, want := strings.Count(out.String(), "| met |"), len(rows); got != want {
		t.Fatalf("%d figures met, want all %d:\n%s", got, want, out.String())
	}
}

func TestTableNamesTheMissedTarget(t *testing.T) {
	var out bytes.Buffer
	missed, err := table(strings.NewReader(oneMissed), &out)
	if err != nil {
		t.Fatal(err)
	}
	want := "assignment latency p99: 450 p99-ms, target <= 300 ms"
	if len(missed) != 1 || missed[0] != want {
		t.Fatalf("missed %q, want [%q]", missed, want)
	}
	if !strings.Contains(out.String(), "| assignment latency p99 | <= 300 ms | 450 p99-ms | DKC ~10 s mean: 22 x faster | MISSED |") {
		t.Fatalf("the table does not show the miss in its row:\n%s", out.String())
	}
}

// The 32 writers' speedup must reach 3 x in each of the last 5 runs saved:
// its figure is the lowest of them, a run under 3 x misses it, so do fewer
// than 5 runs, and a run before the last 5 does not count.
func TestSpeedupHoldsInEachOfFiveRuns(t *testing.T) {
	const line = "BenchmarkPutCheckpointConcurrent-2 3 90000000 ns/op %s speedup\n"
	runs := func(speedups ...string) string {
		var b strings.Builder
		for _, s := range speedups {
			fmt.Fprintf(&b, line, s)
		}
		return b.String()
	}
	for _, tc := range []struct {
		name, out string
		missed    bool
		row       string
	}{
		{"each of five", runs("3.5", "3.1", "4.2", "3.3", "3.0"), false,
			"| PutCheckpoint, 32 writers vs 1 | >= 3 x in each of 5 consecutive runs | 3 speedup, the lowest of 5 runs | 3.00 x one writer; 5 of 5 runs met it (highest 4.2) | met |"},
		{"one of five under", runs("3.5", "3.1", "2.79", "3.3", "4.0"), true,
			"| PutCheckpoint, 32 writers vs 1 | >= 3 x in each of 5 consecutive runs | 2.79 speedup, the lowest of 5 runs | 2.79 x one writer; 4 of 5 runs met it (highest 4) | MISSED |"},
		{"four runs", runs("3.5", "3.1", "4.2", "3.3"), true,
			"| PutCheckpoint, 32 writers vs 1 | >= 3 x in each of 5 consecutive runs | 3.1 speedup, the lowest of 4 runs (5 needed) | 3.10 x one writer; 4 of 4 runs met it (highest 4.2) | MISSED |"},
		{"an earlier run under", runs("2.1", "3.5", "3.1", "4.2", "3.3", "3.2"), false,
			"| PutCheckpoint, 32 writers vs 1 | >= 3 x in each of 5 consecutive runs | 3.1 speedup, the lowest of 5 runs | 3.10 x one writer; 5 of 5 runs met it (highest 4.2) | met |"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			missed, err := table(strings.NewReader(tc.out), &out)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(missed) == 1 && strings.HasPrefix(missed[0], "PutCheckpoint, 32 writers vs 1: "); got != tc.missed {
				t.Errorf("missed %q, want the speedup missed: %v", missed, tc.missed)
			}
			if !strings.Contains(out.String(), tc.row+"\n") {
				t.Errorf("no row %q in:\n%s", tc.row, out.String())
			}
		})
	}
}

// A figure that was not run is reported as such and fails nothing: make
// bench may run a subset.
func TestTableNotRunIsNotAMiss(t *testing.T) {
	var out bytes.Buffer
	missed, err := table(strings.NewReader("BenchmarkBurstCoalescing-2 5 1 ns/op 1 patches/burst\n"), &out)
	if err != nil || len(missed) != 0 {
		t.Fatalf("missed %q, err %v", missed, err)
	}
	if !strings.Contains(out.String(), "| assignment latency p50 | <= 100 ms | not run | | |") {
		t.Fatalf("a figure not run is not shown as such:\n%s", out.String())
	}
}

// A figure not run that make bench does not run names what runs it.
func TestNotRunNamesWhatRunsIt(t *testing.T) {
	var out bytes.Buffer
	if _, err := table(strings.NewReader(strings.Replace(allMet, "BenchmarkFleet/nodes=5000", "BenchmarkFleet/nodes=4000", 1)), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "| fleet of 5,000: all active on a change | <= 15 s | not run (`make fleet-bench FLEET_NODES=5000`) | | |") {
		t.Fatalf("the 5,000-node row does not say how to run it:\n%s", out.String())
	}
	out.Reset()
	if _, err := table(strings.NewReader(strings.Replace(allMet, "BenchmarkFleet/nodes=10000", "BenchmarkFleet/nodes=9000", 1)), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "| fleet of 10,000: all active on a change | reported | not run (`make fleet-bench FLEET_NODES=10000`) | | |") {
		t.Fatalf("the 10,000-node row does not say how to run it:\n%s", out.String())
	}
}

// A fleet's time is set against the write floor measured in the same run,
// read from the other metrics of its line; a run without it says so.
func TestFleetTimeAgainstTheWriteFloorOfItsRun(t *testing.T) {
	var out bytes.Buffer
	if _, err := table(strings.NewReader(allMet), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "| fleet of 5,000: all active on a change | <= 15 s | 12 all-active-s | 4.8 x the API server's write floor (2.5 s at 2000 writes/s) | met |") {
		t.Fatalf("the 5,000-node row does not compare with the run's write floor:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "| fleet of 10,000: all active on a change | reported | 30 all-active-s | write floor not measured | met |") {
		t.Fatalf("the 10,000-node row does not say its run measured no floor:\n%s", out.String())
	}
}

// A run that measured the CPU the change took also sets the time against
// that CPU spread over the machine's cores.
func TestFleetTimeAgainstTheCPUFloorOfItsRun(t *testing.T) {
	saved := strings.Replace(allMet, "2.40 s-per-1000-nodes", "2.40 s-per-1000-nodes 8.00 cpu-floor-s 10.0 agents-cpu-s 6.0 control-plane-cpu-s", 1)
	if saved == allMet {
		t.Fatal("the fixture has no 5,000-node line to extend")
	}
	var out bytes.Buffer
	if _, err := table(strings.NewReader(saved), &out); err != nil {
		t.Fatal(err)
	}
	want := "| fleet of 5,000: all active on a change | <= 15 s | 12 all-active-s | 4.8 x the API server's write floor (2.5 s at 2000 writes/s); 1.5 x its CPU floor (8.0 s: the agents took 10 CPU-s, the control plane 6, alone 3.0 s on these cores) | met |"
	if !strings.Contains(out.String(), want) {
		t.Fatalf("the 5,000-node row does not compare with the run's CPU floor:\n%s", out.String())
	}
}

// A run appended later (make fleet-bench) is read like the rest, and its
// value wins over an earlier one; each run's own line names it.
func TestAppendedRunsAreRead(t *testing.T) {
	saved := "# run: make bench on 2026-11-23 10:00 UTC at abc1234\n" + allMet +
		"# run: make fleet-bench FLEET_NODES=5000 on 2026-11-23 11:00 UTC at abc1234\n" +
		"BenchmarkFleet/nodes=5000 1 13500000000 ns/op 13.5 all-active-s 44 first-rollout-s 94 reconciler-peak-rss-MiB 2.07 writes/node/change\n"
	o, err := parse(strings.NewReader(saved))
	if err != nil {
		t.Fatal(err)
	}
	blk, missed := block(o, "docs/bench/latest.txt", waivers{})
	if len(missed) != 0 {
		t.Fatalf("missed %q", missed)
	}
	if !strings.HasPrefix(blk, "Rendered from `docs/bench/latest.txt`, saved by: make bench on 2026-11-23 10:00 UTC at abc1234; "+
		"make fleet-bench FLEET_NODES=5000 on 2026-11-23 11:00 UTC at abc1234.\n\n| figure |") {
		t.Fatalf("the block does not name the runs:\n%s", blk)
	}
	if !strings.Contains(blk, "| fleet of 5,000: all active on a change | <= 15 s | 13.5 all-active-s |") {
		t.Fatalf("the appended run's figure is not the one shown:\n%s", blk)
	}
}

// -write replaces the block between the markers and nothing else, leaves
// the file alone when the block is already right, and refuses a document
// without exactly one pair of markers.
func TestRewriteReplacesOnlyTheBlock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perf.md")
	doc := "# Perf\n\nintro\n\n<!-- bench:begin -->\n| old | table |\n<!-- bench:end -->\n\nafter\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rewrite(path, "new\n"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if want := "# Perf\n\nintro\n\n<!-- bench:begin -->\nnew\n<!-- bench:end -->\n\nafter\n"; string(got) != want {
		t.Fatalf("rewritten:\n%s\nwant:\n%s", got, want)
	}
	if blk, err := blockOf(got); err != nil || blk != "new\n" {
		t.Fatalf("blockOf: %q, %v", blk, err)
	}
	fi, _ := os.Stat(path)
	if err := rewrite(path, "new\n"); err != nil {
		t.Fatal(err)
	}
	if fi2, _ := os.Stat(path); !os.SameFile(fi, fi2) {
		t.Fatal("an unchanged block rewrote the file")
	}
	for _, bad := range []string{"no markers\n", "<!-- bench:end -->\n<!-- bench:begin -->\n", "<!-- bench:begin -->\n<!-- bench:begin -->\n<!-- bench:end -->\n"} {
		if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := rewrite(path, "x\n"); err == nil {
			t.Errorf("rewrote %q", bad)
		}
	}
}

// The table of docs/performance.md is what benchtable renders from the
// saved output, docs/bench/latest.txt: no figure is typed in. A hand edit of
// either fails here, and so does a MISSED figure that no waiver of
// docs/bench/waivers.txt covers, or a waiver nothing uses.
func TestCommittedTableIsTheSavedOutputs(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	saved, err := os.Open(filepath.Join(root, "docs", "bench", "latest.txt"))
	if err != nil {
		t.Fatalf("the saved benchmark output: %v (make bench writes it)", err)
	}
	defer saved.Close()
	o, err := parse(saved)
	if err != nil {
		t.Fatal(err)
	}
	wv, err := readWaivers(filepath.Join(root, "docs", "bench", waiversFile))
	if err != nil {
		t.Fatal(err)
	}
	want, missed := block(o, "docs/bench/latest.txt", wv)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "performance.md"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := blockOf(doc)
	if err != nil {
		t.Fatalf("docs/performance.md: %v", err)
	}
	if got != want {
		t.Errorf("docs/performance.md's table is not what docs/bench/latest.txt renders; never edit it by hand, "+
			"render it: go run nodeconfig.io/test/bench/benchtable -write docs/performance.md docs/bench/latest.txt\n"+
			"--- in docs/performance.md\n%s--- rendered\n%s", got, want)
	}
	for _, m := range missed {
		t.Errorf("MISSED without a waiver: %s (fix it and re-run, or waive it in docs/bench/%s naming the limit of this machine "+
			"that the same run measured missing the target too: docs/performance.md, \"Waivers\")", m, waiversFile)
	}
	for _, u := range wv.unused(o, "latest.txt") {
		t.Errorf("docs/bench/%s: a waiver nothing uses, remove it: %s", waiversFile, u)
	}
}

// fleet5000 is allMet's 5,000-node line with all-active-s and the CPU it
// took replaced: a run of CPU floor cpuFloor, the agents' and the control
// plane's CPU-s as given.
func fleet5000(t *testing.T, allActive, cpuFloor, agents, controlPlane string) string {
	t.Helper()
	old := "BenchmarkFleet/nodes=5000-2            	       1	12000000000 ns/op	        12.00 all-active-s"
	out := strings.Replace(allMet, old, "BenchmarkFleet/nodes=5000-2 1 1 ns/op "+allActive+" all-active-s", 1)
	out = strings.Replace(out, "2.40 s-per-1000-nodes", "2.40 s-per-1000-nodes "+cpuFloor+" cpu-floor-s "+agents+" agents-cpu-s "+controlPlane+" control-plane-cpu-s", 1)
	if strings.Count(out, " cpu-floor-s") != 2 || !strings.Contains(out, allActive+" all-active-s") {
		t.Fatal("the fixture has no 5,000-node line to change")
	}
	return out
}

const waiver5000 = "missed | fleet of 5,000: all active on a change | control-plane-cpu-floor-s | two cores cannot run the control plane's share of the change in 15 s\n"

// A miss is waived only by a waiver naming its figure, and only while the
// limit the waiver names, as the same run measured it, misses the target
// too: a faster machine's run voids the waiver, and the miss fails again.
func TestMissedWaiverHoldsOnlyWhileItsLimitMisses(t *testing.T) {
	wv, err := parseWaivers(strings.NewReader("# a comment\n\n" + waiver5000))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, out string
		waived    bool
		verdict   string
	}{
		// The control plane's share: 24 s x 20/(10+20) = 16 s, over 15 s.
		{"limit misses too", fleet5000(t, "25.00", "24.0", "10", "20"), true,
			"| MISSED; waived: the control plane's CPU floor alone (its share of the CPU floor, the agents elsewhere), 16.0 s, misses it too |"},
		// 18 s x 20/(10+20) = 12 s: the machine could have met 15 s.
		{"limit meets the target", fleet5000(t, "25.00", "18.0", "10", "20"), false,
			"| MISSED; waiver void: the control plane's CPU floor alone (its share of the CPU floor, the agents elsewhere), 12.0 s, meets the target |"},
		{"no limit measured", strings.Replace(allMet, "12.00 all-active-s", "25.00 all-active-s", 1), false,
			"| MISSED; waiver void: the run measured no control-plane-cpu-floor-s |"},
		// The figure's own run must measure the limit: an earlier run's
		// floor says nothing of this one.
		{"limit of an earlier run", fleet5000(t, "25.00", "24.0", "10", "20") + "BenchmarkFleet/nodes=5000 1 1 ns/op 26 all-active-s\n", false,
			"| MISSED; waiver void: the run measured no control-plane-cpu-floor-s |"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o, err := parse(strings.NewReader(c.out))
			if err != nil {
				t.Fatal(err)
			}
			blk, missed := block(o, "docs/bench/latest.txt", wv)
			if c.waived != (len(missed) == 0) {
				t.Errorf("missed %q, want the miss waived: %v", missed, c.waived)
			}
			if !strings.Contains(blk, c.verdict+"\n") {
				t.Errorf("no verdict %q in:\n%s", c.verdict, blk)
			}
			listed := strings.Contains(blk, "\nWaivers, from `docs/bench/waivers.txt`:\n\n- MISSED, waived (control-plane-cpu-floor-s): fleet of 5,000: all active on a change: two cores cannot")
			if listed != c.waived {
				t.Errorf("the waiver listed under the table: %v, want %v:\n%s", listed, c.waived, blk)
			}
			if unused := wv.unused(o, "latest.txt"); (len(unused) == 0) != c.waived {
				t.Errorf("unused waivers %q; want none only when the waiver holds", unused)
			}
		})
	}
}

// An open waiver lets a MISSED figure pass while the issue it names is the
// work to meet it: the row says MISSED and names the issue, the list under
// the table says why, and the waiver is unused (so make test fails) once
// the figure is met.
func TestOpenWaiverShowsTheMissAndItsIssue(t *testing.T) {
	wv, err := parseWaivers(strings.NewReader("open | fleet of 5,000: all active on a change | #48 | the control plane's own CPU per change is more than these cores give\n"))
	if err != nil {
		t.Fatal(err)
	}
	o, err := parse(strings.NewReader(fleet5000(t, "25.00", "18.0", "10", "20")))
	if err != nil {
		t.Fatal(err)
	}
	blk, missed := block(o, "docs/bench/latest.txt", wv)
	if len(missed) != 0 {
		t.Errorf("missed %q, want the miss passed as open", missed)
	}
	if !strings.Contains(blk, "| MISSED; open in #48 |\n") {
		t.Errorf("the row does not say MISSED and its issue:\n%s", blk)
	}
	if !strings.Contains(blk, "\n- MISSED, open in #48: fleet of 5,000: all active on a change: the control plane's own CPU") {
		t.Errorf("the waivers' list does not name it:\n%s", blk)
	}
	if unused := wv.unused(o, "latest.txt"); len(unused) != 0 {
		t.Errorf("unused %q while the figure misses", unused)
	}
	met, err := parse(strings.NewReader(allMet))
	if err != nil {
		t.Fatal(err)
	}
	if unused := wv.unused(met, "latest.txt"); len(unused) != 1 {
		t.Errorf("unused %q once the figure is met; want the open waiver named", unused)
	}
}

// A waiver that nothing uses fails make test: it would outlive its reason.
func TestUnusedWaiversAreNamed(t *testing.T) {
	wv, err := parseWaivers(strings.NewReader(waiver5000 +
		"missed | no such figure | cpu-floor-s | a figure the table does not have at all\n" +
		"stale | latest.txt | make bench on 2026-11-01 00:00 UTC at abc1234 | a run this file does not hold any more\n" +
		"stale | other.txt | make store-bench on 2026-11-01 00:00 UTC at abc1234 | a run of another file, checked with it\n"))
	if err != nil {
		t.Fatal(err)
	}
	o, _ := parse(strings.NewReader("# run: make bench on 2026-11-23 10:00 UTC at abc1234\n" + allMet))
	got := wv.unused(o, "latest.txt")
	slices.Sort(got)
	want := []string{
		`missed "fleet of 5,000: all active on a change": the figure is not MISSED`,
		`missed "no such figure": no such figure in the table`,
		`stale latest.txt "make bench on 2026-11-01 00:00 UTC at abc1234": no such run in it`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("unused %q\nwant %q", got, want)
	}
}

// A stale waiver marks each figure of its run, and the block lists it.
func TestStaleWaiverMarksItsRunsFigures(t *testing.T) {
	const run = "make fleet-bench FLEET_NODES=5000 on 2026-11-23 11:00 UTC at abc1234-dirty"
	wv, err := parseWaivers(strings.NewReader("stale | latest.txt | " + run + " | run from a tree with uncommitted changes to the fleet\n"))
	if err != nil {
		t.Fatal(err)
	}
	saved := "# run: make bench on 2026-11-23 10:00 UTC at abc1234\n" + allMet + "# run: " + run + "\n" +
		"BenchmarkFleet/nodes=5000 1 1 ns/op 13.5 all-active-s\n"
	o, _ := parse(strings.NewReader(saved))
	blk, _ := block(o, "docs/bench/latest.txt", wv)
	if !strings.Contains(blk, "| fleet of 5,000: all active on a change | <= 15 s | 13.5 all-active-s | 5.4 x the API server's write floor (2.5 s at 2000 writes/s) | met; stale run, waived |\n") {
		t.Errorf("the appended run's figure is not marked stale:\n%s", blk)
	}
	if n := strings.Count(blk, "stale run, waived |"); n != 8 {
		t.Errorf("%d figures marked stale, want the run's 8 of 5,000 nodes:\n%s", n, blk)
	}
	if !strings.HasSuffix(blk, "\n- stale run, waived: "+run+": run from a tree with uncommitted changes to the fleet\n") {
		t.Errorf("the block does not list the waiver:\n%s", blk)
	}
}

func TestParseWaiversRefusesWhatItCannotCheck(t *testing.T) {
	for _, bad := range []string{
		"missed | fleet of 5,000: all active on a change | control-plane-cpu-floor-s\n",        // no why
		"missed | fleet of 5,000: all active on a change | control-plane-cpu-floor-s | slow\n", // a why of one word
		"missed | fleet of 5,000: all active on a change | the-disk | the disk is slower than any other\n",
		"late | latest.txt | make bench at abc1234 | a kind of waiver that does not exist\n",
		waiver5000 + waiver5000,
		"open | fleet of 5,000: all active on a change | issue 48 | an issue named without its number sign\n",
		waiver5000 + "open | fleet of 5,000: all active on a change | #48 | a second waiver of the same figure\n",
	} {
		if _, err := parseWaivers(strings.NewReader(bad)); err == nil {
			t.Errorf("parsed %q", bad)
		}
	}
}

// The command itself: exit 1 and the missed figure on stderr for a miss,
// exit 0 when every target is met; the table goes to stdout either way.
func TestCommandExitsNonZeroOnAMissedTarget(t *testing.T) {
	for _, c := range []struct {
		name, input string
		wantExit    int
		wantStderr  string
	}{
		{"all met", allMet, 0, ""},
		{"one missed", oneMissed, 1, "benchtable: 1 target(s) missed: assignment latency p99: 450 p99-ms, target <= 300 ms\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr, exit := runMain(t, c.input)
			if exit != c.wantExit || stderr != c.wantStderr {
				t.Fatalf("exit %d, stderr %q; want exit %d, stderr %q", exit, stderr, c.wantExit, c.wantStderr)
			}
			if !strings.HasPrefix(stdout, "| figure | target |") || strings.Count(stdout, "\n") != len(rows)+2 {
				t.Fatalf("stdout is not the table:\n%s", stdout)
			}
		})
	}
}

// With -write the command rewrites the document's block from the file it
// reads, also when a target is missed (the document shows the miss), and
// still exits 1 for the miss.
func TestCommandWritesTheBlockAlsoOnAMiss(t *testing.T) {
	dir := t.TempDir()
	saved, doc := filepath.Join(dir, "latest.txt"), filepath.Join(dir, "perf.md")
	if err := os.WriteFile(saved, []byte("# run: make bench on 2026-11-23 10:00 UTC at abc1234\n"+oneMissed), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(doc, []byte("intro\n<!-- bench:begin -->\nhand-typed\n<!-- bench:end -->\nafter\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, exit := runMain(t, "", "-write", doc, saved)
	if exit != 1 || !strings.Contains(stderr, "1 target(s) missed") {
		t.Fatalf("exit %d, stderr %q; want exit 1 for the miss", exit, stderr)
	}
	got, _ := os.ReadFile(doc)
	o, _ := parse(strings.NewReader("# run: make bench on 2026-11-23 10:00 UTC at abc1234\n" + oneMissed))
	want, _ := block(o, sourceName(saved), waivers{})
	if string(got) != "intro\n<!-- bench:begin -->\n"+want+"<!-- bench:end -->\nafter\n" {
		t.Fatalf("the document:\n%s\nwant the block rendered from %s:\n%s", got, saved, want)
	}
	if !strings.Contains(string(got), "| 450 p99-ms | DKC ~10 s mean: 22 x faster | MISSED |") {
		t.Fatalf("the written table does not show the miss:\n%s", got)
	}
}

// runMain runs this test binary as benchtable with args, stdin as its input.
func runMain(t *testing.T, stdin string, args ...string) (stdout, stderr string, exit int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "BENCHTABLE_RUN_MAIN=1", "BENCHTABLE_ARGS="+strings.Join(args, "\n"))
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		exit = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), exit
}

// TestMain runs main instead of the tests when the command test starts
// this binary as benchtable (its arguments in BENCHTABLE_ARGS, one a line).
func TestMain(m *testing.M) {
	if os.Getenv("BENCHTABLE_RUN_MAIN") == "1" {
		os.Args = os.Args[:1]
		if a := os.Getenv("BENCHTABLE_ARGS"); a != "" {
			os.Args = append(os.Args, strings.Split(a, "\n")...)
		}
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}
