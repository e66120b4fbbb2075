// Command benchtable reads Go benchmark output and prints the performance
// table of docs/performance.md: each figure, its target, what was measured,
// and the ratio to the anchor or floor. It exits 1 when a figure misses its
// target, naming each one on stderr, so make bench fails on a regression.
//
// The table in docs/performance.md is this command's, never typed: make
// bench saves its raw output to docs/bench/latest.txt (make fleet-bench
// appends the runs that need a flag, such as 5,000 and 10,000 nodes) and runs
//
//	benchtable -write docs/performance.md docs/bench/latest.txt
//
// which rewrites the block between the bench markers from that file. A
// test of this package fails when the committed block is not what the
// committed output renders.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// row is one figure: a metric of a benchmark and what it is held to.
type row struct {
	figure    string
	bench     string // benchmark name without the -GOMAXPROCS suffix
	metric    string
	target    string
	ok        func(v float64) bool
	reference func(v float64, line map[string]float64) string // ratio to the anchor or floor; line: the run's other metrics (a floor it measured)
}

// runBy names, for the benchmarks make bench does not run, what appends
// them to the saved output; a figure not run says so.
var runBy = map[string]string{
	"BenchmarkFleet/nodes=5000":               "make fleet-bench FLEET_NODES=5000",
	"BenchmarkFleet/nodes=10000":              "make fleet-bench FLEET_NODES=10000",
	"BenchmarkFleet/nodes=5000/selected=1000": "make fleet-bench FLEET_NODES=5000 FLEET_SELECT=1000",
	"BenchmarkFleetFailover/nodes=5000":       "make fleet-bench FLEET_NODES=5000 FLEET_FAILOVER=1",
}

// consecutiveRuns names the benchmarks whose target must hold in every one
// of so many consecutive runs, the last saved: the disk's speed swings
// between runs, and one good run says little.
var consecutiveRuns = map[string]int{
	"BenchmarkPutCheckpointConcurrent": 5,
}

// reportedOnly is the check of a figure with no target: it is shown, never
// missed.
func reportedOnly(float64) bool { return true }

var rows = []row{
	{"PutCheckpoint 64 KiB, fsync, p50", "BenchmarkPutCheckpoint64KiB", "ratio-to-floor", "<= 1.5 x raw bbolt Update",
		func(v float64) bool { return v <= 1.5 }, func(v float64, _ map[string]float64) string { return fmt.Sprintf("%.2f x the raw bbolt floor", v) }},
	{"PutCheckpoint, 32 writers vs 1", "BenchmarkPutCheckpointConcurrent", "speedup", ">= 3 x in each of 5 consecutive runs",
		func(v float64) bool { return v >= 3 }, func(v float64, _ map[string]float64) string { return fmt.Sprintf("%.2f x one writer", v) }},
	{"statusd: 50 changes within 100 ms", "BenchmarkBurstCoalescing", "patches/burst", "1 patch",
		func(v float64) bool { return v <= 1 }, nil},
	{"assignment latency p50", "BenchmarkAssignmentLatency", "p50-ms", "<= 100 ms",
		func(v float64) bool { return v <= 100 }, dkc},
	{"assignment latency p99", "BenchmarkAssignmentLatency", "p99-ms", "<= 300 ms",
		func(v float64) bool { return v <= 300 }, dkc},
	{"API writes per node per config change", "BenchmarkWritesPerNodePerConfigChange", "writes/node/change", "<= 3",
		func(v float64) bool { return v <= 3 }, nil},
	{"API writes per node per hour, steady state", "BenchmarkSteadyStateWritesPerNodePerHour", "writes/node/hour", "0",
		func(v float64) bool { return v == 0 }, func(float64, map[string]float64) string { return "kubelet status alone: 12 per hour" }},
	{"fleet of 1,000: all active on a change", "BenchmarkFleet/nodes=1000", "all-active-s", "<= 10 s",
		func(v float64) bool { return v <= 10 }, func(v float64, _ map[string]float64) string {
			return fmt.Sprintf("DKC: up to 12 s of polling alone (10 s +- 20%%), %.1f x", 12/v)
		}},
	{"fleet of 1,000: reconciler peak RSS", "BenchmarkFleet/nodes=1000", "reconciler-peak-rss-MiB", "<= 100 MiB",
		func(v float64) bool { return v <= 100 }, nil},
	{"fleet of 1,000: API writes per node per change", "BenchmarkFleet/nodes=1000", "writes/node/change", "<= 3",
		func(v float64) bool { return v <= 3 }, nil},
	{"fleet of 1,000: seconds per 1,000 nodes", "BenchmarkFleet/nodes=1000", "s-per-1000-nodes", "reported",
		reportedOnly, nil},
	{"fleet of 1,000: the control plane's CPU per node change", "BenchmarkFleet/nodes=1000", "control-plane-cpu-ms/node", "reported",
		reportedOnly, nil},
	{"fleet of 1,000, kubelet-like Nodes: the control plane's CPU per node change", "BenchmarkFleet/nodes=1000/kubelet-like-nodes", "control-plane-cpu-ms/node", "<= 5 ms",
		func(v float64) bool { return v <= 5 }, nil},
	{"fleet of 1,000, kubelet-like Nodes: etcd's log bytes per node change", "BenchmarkFleet/nodes=1000/kubelet-like-nodes", "etcd-log-kB/node", "reported",
		reportedOnly, nil},
	{"fleet of 1,000: a change after a quiet hour (every node's token due), all active", "BenchmarkFleet/nodes=1000/tokens-due", "all-active-s", "<= 10 s",
		func(v float64) bool { return v <= 10 }, func(v float64, line map[string]float64) string {
			return strings.TrimPrefix(cpuFloor(v, line), "; ")
		}},
	{"fleet of 5,000: all active on a change", "BenchmarkFleet/nodes=5000", "all-active-s", "<= 15 s",
		func(v float64) bool { return v <= 15 }, writeFloor},
	{"fleet of 5,000: all active on a change, to its CPU floor", "BenchmarkFleet/nodes=5000", "ratio-to-cpu-floor", "<= 1.1 x",
		func(v float64) bool { return v <= 1.1 }, func(v float64, line map[string]float64) string {
			return fmt.Sprintf("the CPU floor: %.1f s, all the run's CPU over these cores", line["cpu-floor-s"])
		}},
	{"fleet of 5,000: the control plane's CPU for a change over these cores (all active with the agents on their own CPUs)", "BenchmarkFleet/nodes=5000", "control-plane-cpu-floor-s", "<= 15 s",
		func(v float64) bool { return v <= 15 }, func(v float64, line map[string]float64) string {
			return fmt.Sprintf("%.0f CPU-s of API server, etcd and reconciler", line["control-plane-cpu-s"])
		}},
	{"fleet of 5,000: first rollout, all active", "BenchmarkFleet/nodes=5000", "first-rollout-s", "reported",
		reportedOnly, nil},
	{"fleet of 5,000: first rollout (a new leader, no token held), all active, to a change", "BenchmarkFleet/nodes=5000", "first-rollout-x-change", "<= 2 x",
		func(v float64) bool { return v <= 2 }, func(v float64, line map[string]float64) string {
			return fmt.Sprintf("%.1f s against the change's %.1f s", line["first-rollout-s"], line["all-active-s"])
		}},
	{"fleet of 5,000: the leader killed mid-change, until the new one has every node synced and active, to a warm change", "BenchmarkFleetFailover/nodes=5000", "failover-x-change", "<= 1.5 x",
		func(v float64) bool { return v <= 1.5 }, func(v float64, line map[string]float64) string {
			return fmt.Sprintf("%.1f s against the change's %.1f s, %.1f s of it the killed leader's Lease running out", line["failover-s"], line["change-s"], line["lease-wait-s"])
		}},
	{"fleet of 5,000: reconciler peak RSS", "BenchmarkFleet/nodes=5000", "reconciler-peak-rss-MiB", "<= 100 MiB",
		func(v float64) bool { return v <= 100 }, nil},
	{"fleet of 5,000: API writes per node per change", "BenchmarkFleet/nodes=5000", "writes/node/change", "reported",
		reportedOnly, nil},
	{"fleet of 5,000: seconds per 1,000 nodes", "BenchmarkFleet/nodes=5000", "s-per-1000-nodes", "reported",
		reportedOnly, nil},
	{"fleet of 5,000, a change of 1,000 of them: seconds per 1,000 nodes", "BenchmarkFleet/nodes=5000/selected=1000", "s-per-1000-nodes", "reported",
		reportedOnly, nil},
	{"fleet of 10,000: all active on a change", "BenchmarkFleet/nodes=10000", "all-active-s", "reported",
		reportedOnly, writeFloor},
	{"fleet of 10,000: first rollout, all active", "BenchmarkFleet/nodes=10000", "first-rollout-s", "reported",
		reportedOnly, nil},
	{"fleet of 10,000: reconciler peak RSS", "BenchmarkFleet/nodes=10000", "reconciler-peak-rss-MiB", "<= 100 MiB",
		func(v float64) bool { return v <= 100 }, nil},
	{"fleet of 10,000: seconds per 1,000 nodes", "BenchmarkFleet/nodes=10000", "s-per-1000-nodes", "reported",
		reportedOnly, nil},
	{"real kubelet: ConfigMap edit -> running it, p50", "BenchmarkKubeletRunsNewConfig", "to-kubelet-running-p50-ms", "reported",
		reportedOnly, dkc},
	{"real kubelet: ConfigMap edit -> running it, p99", "BenchmarkKubeletRunsNewConfig", "to-kubelet-running-p99-ms", "reported",
		reportedOnly, dkc},
	{"real kubelet: refused drop-in -> healthy on last-known-good, p50", "BenchmarkBadConfigToHealthyLastKnownGood", "to-healthy-lkg-p50-ms", "reported",
		reportedOnly, nil},
	{"real kubelet: refused drop-in -> healthy on last-known-good, p99", "BenchmarkBadConfigToHealthyLastKnownGood", "to-healthy-lkg-p99-ms", "reported",
		reportedOnly, nil},
}

// dkc compares a latency with Dynamic Kubelet Config's: a change was seen
// after half a 10 s poll and reported after half a 10 s status period, on
// average.
func dkc(ms float64, _ map[string]float64) string {
	return fmt.Sprintf("DKC ~10 s mean: %.0f x faster", 10000/ms)
}

// writeFloor compares a fleet's time with the floor the fleet command
// measured in the same run: one statusd write per node at the API server's
// Node write ceiling.
func writeFloor(s float64, line map[string]float64) string {
	floor, ceiling := line["floor-s"], line["api-writes/s"]
	out := "write floor not measured"
	if floor > 0 && ceiling > 0 {
		out = fmt.Sprintf("%.1f x the API server's write floor (%.1f s at %.0f writes/s)", s/floor, floor, ceiling)
	}
	return out + cpuFloor(s, line)
}

// cpuFloor compares a fleet's time with the CPU it took spread over this
// machine's cores, where the simulated nodes' agents share them with the
// control plane ("" when the run did not measure it). It also gives the
// control plane's share alone: the floor were the agents on machines of
// their own, as real nodes' are.
func cpuFloor(s float64, line map[string]float64) string {
	floor, agents, controlPlane := line["cpu-floor-s"], line["agents-cpu-s"], line["control-plane-cpu-s"]
	if floor <= 0 {
		return ""
	}
	out := fmt.Sprintf("; %.1f x its CPU floor (%.1f s: the agents took %.0f CPU-s, the control plane %.0f", s/floor, floor, agents, controlPlane)
	if agents+controlPlane > 0 {
		out += fmt.Sprintf(", alone %.1f s on these cores", floor*controlPlane/(agents+controlPlane))
	}
	return out + ")"
}

var suffix = regexp.MustCompile(`-\d+$`)

// runPrefix starts the line make bench and make fleet-bench write before
// their output: which run, when, at which commit.
const runPrefix = "# run: "

// output is what benchtable reads of saved benchmark output.
type output struct {
	series  map[string]map[string][]float64 // every run's values by benchmark and metric, in order
	runs    []string                        // the runs' own lines (runPrefix), in order
	benches [][]string                      // each run's benchmarks, as runs
	runOf   map[string]int                  // the run of each benchmark's last value, an index of runs (-1: before any run line)
	line    map[string]map[string]float64   // each benchmark's last line: one run's metrics, none of an earlier run's
}

// lastRun is the run line of bench's last value ("" when none names it).
func (o output) lastRun(bench string) string {
	if i, ok := o.runOf[bench]; ok && i >= 0 {
		return o.runs[i]
	}
	return ""
}

// last is each metric's value in bench's last run: the figure of a
// benchmark run more than once (several -count, or a run appended later).
func (o output) last(bench string) map[string]float64 {
	figures := map[string]float64{}
	for metric, values := range o.series[bench] {
		figures[metric] = values[len(values)-1]
	}
	return figures
}

// parse collects metric values by benchmark, every run's of a benchmark
// run more than once.
func parse(r io.Reader) (output, error) {
	out := output{series: map[string]map[string][]float64{}, runOf: map[string]int{}, line: map[string]map[string]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if run, ok := strings.CutPrefix(sc.Text(), runPrefix); ok {
			out.runs = append(out.runs, strings.TrimSpace(run))
			out.benches = append(out.benches, nil)
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := suffix.ReplaceAllString(f[0], "")
		if out.series[name] == nil {
			out.series[name] = map[string][]float64{}
		}
		out.runOf[name] = len(out.runs) - 1
		if i := len(out.runs) - 1; i >= 0 && !slices.Contains(out.benches[i], name) {
			out.benches[i] = append(out.benches[i], name)
		}
		out.line[name] = map[string]float64{}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			out.series[name][f[i+1]] = append(out.series[name][f[i+1]], v)
			out.line[name][f[i+1]] = v
		}
	}
	return out, sc.Err()
}

func main() {
	fs := flag.NewFlagSet("benchtable", flag.ExitOnError)
	write := fs.String("write", "", "also rewrite the table between the bench markers of this Markdown file (docs/performance.md)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: benchtable [-write docs/performance.md] [BENCHMARK-OUTPUT]  (stdin without a file)")
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:])
	in, name := io.Reader(os.Stdin), "stdin"
	var wv waivers
	if fs.NArg() > 0 {
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			fail(err)
		}
		defer f.Close()
		in, name = f, fs.Arg(0)
		if wv, err = waiversNextTo(name); err != nil {
			fail(err)
		}
	}
	o, err := parse(in)
	if err != nil {
		fail(fmt.Errorf("%s: %w", name, err))
	}
	missed := render(o, wv, filepath.Base(name), os.Stdout)
	for _, u := range wv.unused(o, filepath.Base(name)) {
		// make test fails on it (TestCommittedTableIsTheSavedOutputs); a new
		// run is what makes a waiver unused, so the run itself does not.
		fmt.Fprintf(os.Stderr, "benchtable: a waiver of %s is unused, remove it: %s\n", waiversFile, u)
	}
	if *write != "" {
		// Written also when a target is missed: the document shows the miss.
		blk, _ := block(o, sourceName(name), wv)
		if err := rewrite(*write, blk); err != nil {
			fail(err)
		}
	}
	if len(missed) > 0 {
		fmt.Fprintf(os.Stderr, "benchtable: %d target(s) missed: %s\n", len(missed), strings.Join(missed, "; "))
		os.Exit(1)
	}
}

// sourceName is how the block names the saved output: relative to the
// working directory (make's: the repository), however it was given.
func sourceName(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		if wd, err := os.Getwd(); err == nil {
			if rel, err := filepath.Rel(wd, abs); err == nil && !strings.HasPrefix(rel, "..") {
				path = rel
			}
		}
	}
	return filepath.ToSlash(path)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "benchtable:", err)
	os.Exit(1)
}

// table prints the performance table for the benchmark output in r and
// returns the figures that missed their target, each with its target and
// measurement.
func table(r io.Reader, w io.Writer) (missed []string, err error) {
	o, err := parse(r)
	if err != nil {
		return nil, err
	}
	return render(o, waivers{}, "", w), nil
}

// render prints the table of o, read from the saved file named file (its
// base name, as waivers name it). A figure that was not run is shown as
// such (with what runs it, when make bench does not) and is not a miss:
// make bench may run a subset. A miss that wv waives is shown with its
// waiver and not returned; a figure of a run wv waives as stale says so.
func render(o output, wv waivers, file string, w io.Writer) (missed []string) {
	fmt.Fprintln(w, "| figure | target | measured | ratio to anchor or floor | |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- |")
	for _, r := range rows {
		figures := o.last(r.bench)
		v, ok := figures[r.metric]
		if !ok {
			notRun := "not run"
			if cmd := runBy[r.bench]; cmd != "" {
				notRun += " (`" + cmd + "`)"
			}
			fmt.Fprintf(w, "| %s | %s | %s | | |\n", r.figure, r.target, notRun)
			continue
		}
		measured := strconv.FormatFloat(v, 'f', -1, 64) + " " + r.metric
		met := r.ok(v)
		var ofRuns string
		if n := consecutiveRuns[r.bench]; n > 0 {
			v, measured, met, ofRuns = worstOfRuns(r, n, o.series[r.bench][r.metric])
		}
		verdict := "met"
		if !met {
			verdict = "MISSED"
			waived, note := wv.waiveMiss(r, o.line[r.bench])
			if note != "" {
				verdict += "; " + note
			}
			if !waived {
				missed = append(missed, fmt.Sprintf("%s: %s, target %s", r.figure, measured, r.target))
			}
		}
		if run := o.lastRun(r.bench); run != "" && wv.stale[staleKey{file, run}] != "" {
			verdict += "; stale run, waived"
		}
		ref := ""
		if r.reference != nil {
			ref = r.reference(v, figures)
		}
		ref += ofRuns
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", r.figure, r.target, measured, ref, verdict)
	}
	return missed
}

// worstOfRuns judges a row that must hold in every one of n consecutive
// runs by the last n values saved: its figure is the lowest of them (the
// rows held so are lower bounds), and fewer runs than n miss the target.
func worstOfRuns(r row, n int, all []float64) (v float64, measured string, met bool, ofRuns string) {
	last := all[max(0, len(all)-n):]
	v = slices.Min(last)
	metIn := 0
	for _, x := range last {
		if r.ok(x) {
			metIn++
		}
	}
	met = len(last) == n && metIn == n
	measured = fmt.Sprintf("%s %s, the lowest of %d runs", strconv.FormatFloat(v, 'f', -1, 64), r.metric, len(last))
	if len(last) < n {
		measured += fmt.Sprintf(" (%d needed)", n)
	}
	ofRuns = fmt.Sprintf("; %d of %d runs met it (highest %s)", metIn, len(last), strconv.FormatFloat(slices.Max(last), 'f', -1, 64))
	return v, measured, met, ofRuns
}

// The block of docs/performance.md that is benchtable's.
const (
	beginMarker = "<!-- bench:begin -->\n"
	endMarker   = "<!-- bench:end -->"
)

// block is what goes between the markers: where the figures were saved and
// by which runs, then the table.
func block(o output, source string, wv waivers) (string, []string) {
	var b strings.Builder
	if len(o.runs) == 0 {
		fmt.Fprintf(&b, "Rendered from `%s`, which holds no run yet: `make bench` saves one.\n\n", source)
	} else {
		fmt.Fprintf(&b, "Rendered from `%s`, saved by: %s.\n\n", source, strings.Join(o.runs, "; "))
	}
	file := filepath.Base(source)
	missed := render(o, wv, file, &b)
	var used []string
	for _, r := range rows {
		if mw, ok := wv.missed[r.figure]; ok {
			if waived, _ := wv.waiveMiss(r, o.line[r.bench]); waived && mw.open {
				used = append(used, fmt.Sprintf("- MISSED, open in %s: %s: %s\n", mw.limit, r.figure, mw.why))
			} else if waived {
				used = append(used, fmt.Sprintf("- MISSED, waived (%s): %s: %s\n", mw.limit, r.figure, mw.why))
			}
		}
	}
	for _, run := range o.runs {
		if why := wv.stale[staleKey{file, run}]; why != "" {
			used = append(used, fmt.Sprintf("- stale run, waived: %s: %s\n", run, why))
		}
	}
	if len(used) > 0 {
		fmt.Fprintf(&b, "\nWaivers, from `%s`:\n\n%s", pathJoin(source, waiversFile), strings.Join(used, ""))
	}
	return b.String(), missed
}

// pathJoin names a file beside source, in source's slash-separated form.
func pathJoin(source, name string) string {
	if i := strings.LastIndex(source, "/"); i >= 0 {
		return source[:i+1] + name
	}
	return name
}

// blockOf returns the text between the markers of doc.
func blockOf(doc []byte) (string, error) {
	i, j, err := markers(doc)
	if err != nil {
		return "", err
	}
	return string(doc[i:j]), nil
}

// markers finds the block: from after the begin marker's line to the end
// marker, each there once.
func markers(doc []byte) (from, to int, err error) {
	begin, end := []byte(beginMarker), []byte(endMarker)
	if bytes.Count(doc, begin) != 1 || bytes.Count(doc, end) != 1 {
		return 0, 0, fmt.Errorf("want one %q line and one %q line", strings.TrimSpace(beginMarker), endMarker)
	}
	from, to = bytes.Index(doc, begin)+len(begin), bytes.Index(doc, end)
	if to < from {
		return 0, 0, fmt.Errorf("%q comes before %q", endMarker, strings.TrimSpace(beginMarker))
	}
	return from, to, nil
}

// rewrite replaces the block of the Markdown file at path with blk, by a
// rename: a reader sees the old file or the new one.
func rewrite(path, blk string) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	i, j, err := markers(doc)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	updated := append(append(append([]byte(nil), doc[:i]...), blk...), doc[j:]...)
	if bytes.Equal(updated, doc) {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(updated); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(fi.Mode().Perm()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
