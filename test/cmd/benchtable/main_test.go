package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// allMet is benchmark output in which every figure meets its target.
const allMet = `goos: linux
goarch: amd64
BenchmarkPutCheckpoint64KiB-2          	     100	   5123456 ns/op	         1.21 ratio-to-floor
BenchmarkPutCheckpointConcurrent-2     	       1	 900000000 ns/op	         4.50 speedup
BenchmarkBurstCoalescing-2             	       5	 130000000 ns/op	        28.00 ms-after-last-change	         1.000 patches/burst
BenchmarkAssignmentLatency-2           	       1	2000000000 ns/op	        41.00 p50-ms	        95.00 p99-ms
BenchmarkWritesPerNodePerConfigChange-2	       1	3000000000 ns/op	         2.00 writes/node/change
BenchmarkSteadyStateWritesPerNodePerHour-2	   1	3000000000 ns/op	         0 writes/node/hour
BenchmarkFleet/nodes=1000-2            	       1	60000000000 ns/op	         7.50 all-active-s	        80.00 reconciler-peak-rss-MiB	         2.10 writes/node/change
BenchmarkFleet/nodes=5000-2            	       1	90000000000 ns/op	        30.00 all-active-s	       300.00 reconciler-peak-rss-MiB
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
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "BENCHTABLE_RUN_MAIN=1")
			cmd.Stdin = strings.NewReader(c.input)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			exit := 0
			if ee, ok := err.(*exec.ExitError); ok {
				exit = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if exit != c.wantExit || stderr.String() != c.wantStderr {
				t.Fatalf("exit %d, stderr %q; want exit %d, stderr %q", exit, stderr.String(), c.wantExit, c.wantStderr)
			}
			if !strings.HasPrefix(stdout.String(), "| figure | target |") || strings.Count(stdout.String(), "\n") != len(rows)+2 {
				t.Fatalf("stdout is not the table:\n%s", stdout.String())
			}
		})
	}
}

// TestMain runs main instead of the tests when the command test starts
// this binary as benchtable.
func TestMain(m *testing.M) {
	if os.Getenv("BENCHTABLE_RUN_MAIN") == "1" {
		os.Args = os.Args[:1]
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}
