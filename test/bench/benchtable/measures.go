package main

// The code a figure measures, by the benchmark behind it: repository paths
// (directories or files) whose change can change the figure. A saved run
// is stale for a figure when one of its paths changed between the run's
// commit and HEAD (see docs/performance.md, "When a figure is stale").
//
// The paths are whole Go modules, not the packages a benchmark imports
// today: a module's directory holds its go.mod and go.sum (the versions of
// bbolt, gRPC, client-go that run in the figure) as well as its code, and a
// list of packages rots as imports move. A benchmark that runs the
// services' binaries (e2e, the fleet's reconciler, the real node's images)
// measures every service module, not only what its test package imports.
// Too wide a list costs a re-run or a waiver; too narrow a list hides a
// regression behind an old figure.
var (
	// The services that every end-to-end figure runs as binaries or
	// libraries (the plugin, kubectl-nodeconfig, runs in none of them).
	everyService = []string{"proto", "services/api", "services/checkpointd", "services/configcheck",
		"services/reconciler", "services/servekit", "services/statusd"}
	// The test harness's control plane: its framework, the test module's
	// dependency versions, the CRDs it installs, and hack/testbin's
	// kube-apiserver and etcd versions.
	controlPlane = []string{"test/framework", "test/go.mod", "test/go.sum", "deploy/crd", "hack/testbin"}
	// The in-process store benchmarks: grpcapi and what it imports.
	checkpointStore = []string{"proto", "services/api", "services/checkpointd", "services/configcheck", "services/servekit"}
)

func paths(groups ...[]string) []string {
	var out []string
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

// notBuilt are packages inside the measured paths that a benchmark's Go
// package does not build, as git pathspecs that exclude them. Each is
// checked against the package's dependencies (go list -deps, in
// TestExcludedPathsAreNotBuilt), so the exclusion fails loudly once an
// import brings the package in.
var notBuilt = map[string][]string{
	// The real node's host observer: only the real node's and make run's
	// tests take snapshots.
	"test/e2e":         {hostObserver},
	"test/bench/fleet": {hostObserver},
}

const hostObserver = "test/framework/hostsnapshot"

// excluding is the git pathspec that leaves path out.
func excluding(path string) string { return ":(exclude)" + path }

var (
	e2ePaths      = paths(everyService, controlPlane, []string{"test/e2e", excluding(hostObserver)})
	fleetPaths    = paths(everyService, controlPlane, []string{"test/bench/fleet", "deploy/rbac.yaml", "deploy/flowcontrol.yaml", excluding(hostObserver)})
	realNodePaths = paths(everyService, controlPlane, []string{"test/realnode", "test/images", "deploy", "Dockerfile"})
)

var measures = map[string][]string{
	"BenchmarkPutCheckpoint64KiB":                  checkpointStore,
	"BenchmarkPutCheckpointConcurrent":             checkpointStore,
	"BenchmarkBurstCoalescing":                     {"proto", "services/api", "services/servekit", "services/statusd"},
	"BenchmarkAssignmentLatency":                   e2ePaths,
	"BenchmarkWritesPerNodePerConfigChange":        e2ePaths,
	"BenchmarkSteadyStateWritesPerNodePerHour":     e2ePaths,
	"BenchmarkFleet/nodes=1000":                    fleetPaths,
	"BenchmarkFleet/nodes=1000/tokens-due":         fleetPaths,
	"BenchmarkFleet/nodes=1000/kubelet-like-nodes": fleetPaths,
	"BenchmarkFleet/nodes=5000":                    fleetPaths,
	"BenchmarkFleet/nodes=5000/selected=1000":      fleetPaths,
	"BenchmarkFleet/nodes=10000":                   fleetPaths,
	"BenchmarkFleetFailover/nodes=5000":            fleetPaths,
	"BenchmarkKubeletRunsNewConfig":                realNodePaths,
	"BenchmarkBadConfigToHealthyLastKnownGood":     realNodePaths,
}
