// Command fleet measures a rollout to a fleet of simulated nodes on a real
// API server: every node is a real Node object with a real checkpointd store
// and a real statusd, hosted by this process (thousands of processes would
// not fit the machine) or, past -agents-per-process nodes, by a few child
// processes of this command (one process's open files would not fit them
// all); the reconciler is the real binary. Before the rollout it measures
// the API server's Node write ceiling, the floor under a change's time. It
// prints how long the fleet takes to show a new config active, against
// that floor, the reconciler's memory, and the API writes.
//
//	go run ./test/bench/fleet -nodes 1000
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"nodeconfig.io/test/framework/cluster"
	"nodeconfig.io/test/framework/proc"
)

const (
	namespace = "fleet"
	label     = "nodeconfig.io/fleet"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == agentHostFlag {
		if err := agentHostMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "fleet agent host:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(parseFlags()); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

// run runs the phases in order and stops at the first that fails; whatever
// the phases started is stopped on the way out, the last started first.
func run(o options) (err error) {
	p, err := o.plan()
	if err != nil {
		return err
	}
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer func() { err = withCause(ctx, err) }()
	r := &fleetRun{plan: p, ctx: ctx, cancel: cancel}
	defer r.stopAll()
	for _, phase := range []func() error{
		// Start-up.
		r.makeStateDir,
		r.startCluster,
		r.createNodes,
		r.setUpAuth,
		r.startNodeAgents,
		r.measureCeilings,
		r.startReconciler,
		// The first rollout, then the change on the settled fleet.
		r.firstRollout,
		r.settle,
		r.startProfiling,
		r.changeConfig,
		// The figures.
		r.reportChange,
		r.stopProfiling,
		r.reportAPICalls,
		r.reportMemory,
		r.reportBenchmark,
		r.checkSyncs,
		// The operator's view of it.
		r.checkPlugin,
		// A change whose leader dies half-way.
		r.failOver,
	} {
		r.peak.enter(phase)
		if err := phase(); err != nil {
			return err
		}
	}
	return nil
}

// fleetRun is one run's state, handed from phase to phase: the plan, what
// has been started, and the figures measured so far.
type fleetRun struct {
	plan
	ctx    context.Context
	cancel context.CancelCauseFunc
	// stops undo what the phases started, in reverse (see onStop).
	stops []func()

	root           string // the state directory
	c              *cluster.Cluster
	adminCfg       *rest.Config
	admin          kubernetes.Interface
	watch          *activeWatch
	sec            *security    // nil without -auth
	policy         *policyProbe // nil without -auth or with one node
	hosts          *agentHosts  // nil when this process hosts the agents
	reconciler     *proc.Process
	reconcilerAddr string            // its gRPC API
	metricsAddr    string            // the reconciler's
	standby        *proc.Process     // with -failover, the second reconciler
	standbyMetrics string            // its metrics address
	peak           *peakWatch        // its memory over the run
	pids           cpuPids           // whose CPU the figures count
	cm             *corev1.ConfigMap // the fleet's config as last written
	stopProfile    func() error      // nil without -profile

	figures
}
