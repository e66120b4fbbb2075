// Package framework holds nothing itself: its sub-packages are what the
// tests under test/ (and 'make run', 'make cluster', the fleet benchmark)
// are built from.
//
//   - cluster: a real etcd and kube-apiserver on loopback, one per test
//     package (Main), with the CRDs installed;
//   - sim: simulated nodes (a Node object, checkpointd and statusd as real
//     processes) and the reconciler, against that control plane;
//   - testenv: what e2e and integration share on top of cluster and sim;
//   - nodeview: what a Node says about its config, as a user reads it;
//   - proc: child processes with their logs, free ports, waits, the repo's
//     binaries;
//   - audit: counts of API requests in the API server's audit log;
//   - pki: a throwaway certificate authority, and the agents' certificate;
//   - readonlymount: a directory made read-only even for root;
//   - hostsnapshot: the host's mounts, processes, iptables rules, links,
//     sysctls and cgroups as the kernel shows them, to compare before and
//     after a run, and the TCP ports a process tree listens on.
//
// The tests themselves are in test/e2e, test/integration, test/crash,
// test/realnode and test/images; the benchmark commands in test/bench; the
// commands 'make run', 'make cluster' and 'make images' build in test/cmd.
package framework
