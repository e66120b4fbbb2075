// Command benchtable reads Go benchmark output (make bench collects it) and
// prints the performance table of docs/performance.md: each figure, its
// target, what was measured, and the ratio to the anchor or floor. It exits
// 1 when a figure misses its target, naming each one on stderr, so make
// bench fails on a regression.
//
//	make bench    # runs the benchmarks, then this
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
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
	reference func(v float64) string // ratio to the anchor or floor
}

var rows = []row{
	{"PutCheckpoint 64 KiB, fsync, p50", "BenchmarkPutCheckpoint64KiB", "ratio-to-floor", "<= 1.5 x raw bbolt Update",
		func(v float64) bool { return v <= 1.5 }, func(v float64) string { return fmt.Sprintf("%.2f x the raw bbolt floor", v) }},
	{"PutCheckpoint, 32 writers vs 1", "BenchmarkPutCheckpointConcurrent", "speedup", ">= 3 x",
		func(v float64) bool { return v >= 3 }, func(v float64) string { return fmt.Sprintf("%.2f x one writer", v) }},
	{"statusd: 50 changes within 100 ms", "BenchmarkBurstCoalescing", "patches/burst", "1 patch",
		func(v float64) bool { return v <= 1 }, nil},
	{"assignment latency p50", "BenchmarkAssignmentLatency", "p50-ms", "<= 100 ms",
		func(v float64) bool { return v <= 100 }, dkc},
	{"assignment latency p99", "BenchmarkAssignmentLatency", "p99-ms", "<= 300 ms",
		func(v float64) bool { return v <= 300 }, dkc},
	{"API writes per node per config change", "BenchmarkWritesPerNodePerConfigChange", "writes/node/change", "<= 3",
		func(v float64) bool { return v <= 3 }, nil},
	{"API writes per node per hour, steady state", "BenchmarkSteadyStateWritesPerNodePerHour", "writes/node/hour", "0",
		func(v float64) bool { return v == 0 }, func(float64) string { return "kubelet status alone: 12 per hour" }},
	{"fleet of 1,000: all active on a change", "BenchmarkFleet/nodes=1000", "all-active-s", "<= 10 s",
		func(v float64) bool { return v <= 10 }, func(v float64) string {
			return fmt.Sprintf("DKC: up to 12 s of polling alone (10 s +- 20%%), %.1f x", 12/v)
		}},
	{"fleet of 1,000: reconciler peak RSS", "BenchmarkFleet/nodes=1000", "reconciler-peak-rss-MiB", "<= 100 MiB",
		func(v float64) bool { return v <= 100 }, nil},
	{"fleet of 1,000: API writes per node per change", "BenchmarkFleet/nodes=1000", "writes/node/change", "<= 3",
		func(v float64) bool { return v <= 3 }, nil},
	{"fleet of 5,000: all active on a change", "BenchmarkFleet/nodes=5000", "all-active-s", "reported",
		func(float64) bool { return true }, nil},
	{"fleet of 5,000: reconciler peak RSS", "BenchmarkFleet/nodes=5000", "reconciler-peak-rss-MiB", "reported",
		func(float64) bool { return true }, nil},
	{"real kubelet: ConfigMap edit -> running it, p50", "BenchmarkKubeletRunsNewConfig", "to-kubelet-running-p50-ms", "reported",
		func(float64) bool { return true }, dkc},
	{"real kubelet: ConfigMap edit -> running it, p99", "BenchmarkKubeletRunsNewConfig", "to-kubelet-running-p99-ms", "reported",
		func(float64) bool { return true }, dkc},
	{"real kubelet: refused drop-in -> healthy on last-known-good, p50", "BenchmarkBadConfigToHealthyLastKnownGood", "to-healthy-lkg-p50-ms", "reported",
		func(float64) bool { return true }, nil},
	{"real kubelet: refused drop-in -> healthy on last-known-good, p99", "BenchmarkBadConfigToHealthyLastKnownGood", "to-healthy-lkg-p99-ms", "reported",
		func(float64) bool { return true }, nil},
}

// dkc compares a latency with Dynamic Kubelet Config's: a change was seen
// after half a 10 s poll and reported after half a 10 s status period, on
// average.
func dkc(ms float64) string {
	return fmt.Sprintf("DKC ~10 s mean: %.0f x faster", 10000/ms)
}

var suffix = regexp.MustCompile(`-\d+$`)

// parse collects metric values by benchmark; a benchmark run more than
// once (several -count) keeps its last value.
func parse(r io.Reader) (map[string]map[string]float64, error) {
	out := map[string]map[string]float64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := suffix.ReplaceAllString(f[0], "")
		if out[name] == nil {
			out[name] = map[string]float64{}
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			out[name][f[i+1]] = v
		}
	}
	return out, sc.Err()
}

func main() {
	in := io.Reader(os.Stdin)
	if len(os.Args) > 1 {
		f, err := os.Open(os.Args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchtable:", err)
			os.Exit(1)
		}
		defer f.Close()
		in = f
	}
	missed, err := table(in, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	if len(missed) > 0 {
		fmt.Fprintf(os.Stderr, "benchtable: %d target(s) missed: %s\n", len(missed), strings.Join(missed, "; "))
		os.Exit(1)
	}
}

// table prints the performance table for the benchmark output in r and
// returns the figures that missed their target, each with its target and
// measurement. A figure that was not run is shown as such and is not a miss:
// make bench may run a subset.
func table(r io.Reader, w io.Writer) (missed []string, err error) {
	got, err := parse(r)
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(w, "| figure | target | measured | ratio to anchor or floor | |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- |")
	for _, r := range rows {
		v, ok := got[r.bench][r.metric]
		if !ok {
			fmt.Fprintf(w, "| %s | %s | not run | | |\n", r.figure, r.target)
			continue
		}
		measured := strconv.FormatFloat(v, 'f', -1, 64) + " " + r.metric
		verdict := "met"
		if !r.ok(v) {
			verdict = "MISSED"
			missed = append(missed, fmt.Sprintf("%s: %s, target %s", r.figure, measured, r.target))
		}
		ref := ""
		if r.reference != nil {
			ref = r.reference(v)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", r.figure, r.target, measured, ref, verdict)
	}
	return missed, nil
}
