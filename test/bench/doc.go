// Package bench holds nothing itself: its sub-packages are the benchmark
// commands 'make bench' and 'make fleet-bench' run.
//
//   - fleet: a rollout to a fleet of simulated nodes on a real API server;
//   - benchtable: the table of docs/performance.md, rendered from the saved
//     benchmark output, failing on a missed target.
//
// The benchmarks that need a test package's harness stay with it: those of
// test/e2e (assignment latency, writes per node) and of test/realnode (the
// real kubelet).
package bench
