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
//	go run ./test/cmd/fleet -nodes 1000
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/procfs"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/servekit/authn"
	"nodeconfig.io/test/audit"
	"nodeconfig.io/test/cluster"
	"nodeconfig.io/test/proc"
)

const (
	namespace = "fleet"
	label     = "nodeconfig.io/fleet"
)

// defaultSoak is the fleet NodeConfig's soak: short, so a run is short, and
// at 5,000 nodes and more shorter than the change itself.
const defaultSoak = 20 * time.Second

// options are the command's flags.
type options struct {
	nodes, selected, workers, perProcess       int
	fsync, keep, auth, coldReviews, policyCost bool
	idleWithoutStatusd, priorityAndFairness    bool
	profiles, maxInTrial                       string
	ceiling, idle, soak, tokensDue             time.Duration
	reconcilerFlags                            []string
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == agentHostFlag {
		if err := agentHostMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "fleet agent host:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	flag.IntVar(&o.nodes, "nodes", 1000, "simulated nodes")
	flag.IntVar(&o.selected, "select", 0, "how many of the nodes the NodeConfig selects (0: all); the others' agents run idle beside the rollout, so a rollout of one size can be measured in clusters of others")
	flag.BoolVar(&o.idleWithoutStatusd, "idle-without-statusd", false, "with -select, the idle nodes run their checkpointd alone: no statusd, so no API connection or Node watch of theirs")
	flag.BoolVar(&o.fsync, "fsync", false, "fsync every store commit and every config file written; all nodes share this machine's one disk, where real nodes each have their own, so off by default")
	flag.IntVar(&o.workers, "workers", 16, "the reconciler's --workers (its default)")
	flag.BoolVar(&o.keep, "keep", false, "keep the state directory")
	flag.StringVar(&o.profiles, "profile", "", "write CPU profiles of the reconciler, the API server, this process and each agent host during the config change, and the reconciler's heap after it, to this directory (this process's profile is the agents' up to -agents-per-process nodes, the harness's alone above)")
	flag.BoolVar(&o.auth, "auth", true, "the installed path: each agent serves TLS on a loopback address of its own and checks the reconciler's per-node token with TokenReview; false: unix sockets, no authentication")
	flag.IntVar(&o.perProcess, "agents-per-process", 3000, fmt.Sprintf("most nodes whose agents one process hosts, about %d open files each: up to this many this process hosts them all, a larger fleet is split evenly across child processes of this command", filesPerNode))
	flag.Func("reconciler-flag", "one more flag for the reconciler, e.g. -reconciler-flag=--agent-max-connections=64 (repeatable)", func(v string) error {
		o.reconcilerFlags = append(o.reconcilerFlags, v)
		return nil
	})
	flag.StringVar(&o.maxInTrial, "max-in-trial", "100%", "the NodeConfig's spec.rollout.maxInTrial: under 100% the rollouts are paced, and the nodes it holds back wait for places")
	flag.DurationVar(&o.ceiling, "ceiling", 5*time.Second, "how long to measure the API server's Node write ceiling before the rollout (0: not measured)")
	flag.DurationVar(&o.soak, "soak", defaultSoak, "the NodeConfig's spec.soakSeconds: shorter than the change, the first nodes' promotions run during it and take their share of its CPU")
	flag.DurationVar(&o.idle, "idle", 10*time.Second, "how long to measure the CPU the settled fleet takes before the change (0: not measured)")
	flag.BoolVar(&o.priorityAndFairness, "priority-and-fairness", true, "run the API server with API Priority and Fairness, as clusters run it, and with -auth the agents in the priority level of deploy/flowcontrol.yaml; false: past 400 reads or 200 writes in flight it answers 429")
	flag.BoolVar(&o.policyCost, "policy-cost", true, "with -auth, after the write ceiling, measure the API server's CPU per Node write with the agents' admission policy bound and unbound (it matches every Node update, the kubelets' too)")
	flag.BoolVar(&o.coldReviews, "cold-reviews", true, "with -auth, the change waits until every agent's cached review of its token has expired (a minute after the last TokenReview in the audit log), as after any quiet spell, so that fleets of every size run it alike; false: it follows the first rollout's promotion and the idle measurement at once")
	flag.DurationVar(&o.tokensDue, "tokens-due", 0, "the change as after a quiet hour: every node's token falls due for renewal this long after it was minted (the reconciler's --agent-token-renew-after), and the settled fleet idles that long and 5 s more before the change, past the agents' one-minute review cache too (0: the change follows the first rollout at once)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

// stopper is the agents, in this process or in children.
type stopper interface{ stop() }

type stopFunc func()

func (f stopFunc) stop() { f() }

func run(o options) (err error) {
	n := o.nodes
	if n < 1 || o.perProcess < 1 {
		return errors.New("-nodes and -agents-per-process must be at least 1")
	}
	if o.tokensDue > 0 {
		if !o.auth {
			return errors.New("-tokens-due needs -auth: without authentication there are no tokens")
		}
		if o.tokensDue < time.Minute {
			return fmt.Errorf("-tokens-due %v: at least 1m, the agents' review cache, so that every token is reviewed again", o.tokensDue)
		}
		o.reconcilerFlags = append(o.reconcilerFlags, "--agent-token-renew-after="+o.tokensDue.String())
		o.idle = max(o.idle, o.tokensDue+5*time.Second)
	}
	// sel is the rollout's size: every figure of the change is per
	// selected node.
	sel := n
	if o.selected != 0 {
		if o.selected < 1 || o.selected > n {
			return fmt.Errorf("-select %d: it must be between 1 and -nodes (%d)", o.selected, n)
		}
		sel = o.selected
	}
	chosen := selection{n: n, sel: sel}
	// reporting is how many nodes run a statusd.
	reporting := n
	if o.idleWithoutStatusd {
		reporting = sel
	}
	hosted := n > o.perProcess // by child processes
	// The waits: five minutes, more for fleets over 5,000 (10,000 nodes'
	// first rollout mints and reviews 10,000 tokens).
	wait := max(5*time.Minute, time.Duration(n)*60*time.Millisecond) + o.soak
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer func() {
		// A stop from outside (a signal, an agent host gone) is the
		// reason, not the "context canceled" it caused.
		if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(err, cause) {
			err = fmt.Errorf("%w (%v)", cause, err)
		}
	}()
	root, err := os.MkdirTemp("", "ncf-")
	if err != nil {
		return err
	}
	if !o.keep {
		defer os.RemoveAll(root)
	}
	fmt.Printf("fleet of %d nodes (fsync %v, authentication %v), state in %s\n", n, o.fsync, o.auth, root)
	// This process's children inherit the limit: the API server holds a
	// connection per statusd too.
	want := filesPerNode*n + 4096
	if hosted {
		want = n + 4096
	}
	raiseFileLimit(want)
	c, err := cluster.Start(ctx, cluster.Options{Dir: filepath.Join(root, "cluster"), AuditLog: true, PriorityAndFairness: o.priorityAndFairness})
	if err != nil {
		return err
	}
	defer c.Stop()
	adminCfg := rest.CopyConfig(c.Config)
	adminCfg.QPS, adminCfg.Burst = 5000, 10000
	admin, err := kubernetes.NewForConfig(adminCfg)
	if err != nil {
		return err
	}

	t0 := time.Now()
	if err := forEach(n, 64, func(i int) error {
		name, role := nodeName(i), "bench"
		if !chosen.selected(i) {
			role = "idle"
		}
		_, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name: name, Labels: map[string]string{label: role, "kubernetes.io/hostname": name},
		}}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("create nodes: %w", err)
	}
	fmt.Printf("  %d Node objects created in %v\n", n, since(t0))
	if sel < n {
		idle := "the agents"
		if o.idleWithoutStatusd {
			idle = "the checkpointds (no statusd)"
		}
		fmt.Printf("  the NodeConfig selects %d of them; %s of the other %d run idle\n", sel, idle, n-sel)
	}

	watch := newActiveWatch(admin, reporting, sel)
	go watch.run(ctx)

	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	var sec *security
	var policy *policyProbe
	if o.auth {
		if sec, err = newSecurity(ctx, admin, c.Kubeconfig, root); err != nil {
			return err
		}
		if n > 1 {
			if policy, err = newPolicyProbe(ctx, c.Config); err != nil {
				return err
			}
			if err := policy.wait(ctx, true); err != nil {
				return err
			}
		}
	}
	t0 = time.Now()
	var agents stopper
	var hosts *agentHosts
	if hosted {
		if hosts, err = startAgentHosts(ctx, cancel, c.Kubeconfig, root, n, o.perProcess, o.fsync, sec, chosen, o.idleWithoutStatusd, wait); err != nil {
			return err
		}
		agents = hosts
		fmt.Printf("  %d agent host processes of at most %d nodes each serving\n", len(hosts.hosts), o.perProcess)
	} else {
		logFile, err := os.Create(filepath.Join(root, "agents.log"))
		if err != nil {
			return err
		}
		defer logFile.Close()
		log := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelWarn}))
		// The statusds stop before their checkpointds, as in a host.
		agentsCtx, stopStatusds := context.WithCancel(ctx)
		a, err := startAgents(agentsCtx, c.Config, root, 0, n, o.fsync, sec, chosen.withStatusd(o.idleWithoutStatusd), log)
		agents = stopFunc(func() { stopStatusds(); a.stop() })
		if err != nil {
			agents.stop()
			return err
		}
	}
	defer agents.stop()
	if err := watch.waitReported(ctx, wait); err != nil {
		return err
	}
	fmt.Printf("  %d agents started and %d reporting in %v\n", n, reporting, since(t0))

	// The API server's write ceiling, with the agents watching their
	// Nodes, before anything of nodeconfig's writes.
	var writeFloor float64 // Node writes a second: the change's floor
	if o.ceiling > 0 {
		probe, err := adminCeiling(ctx, c.Config, n, o.ceiling, c.APIServer.Pid())
		if err != nil {
			return err
		}
		writeFloor = probe.perSecond
		fmt.Printf("  API server write ceiling: %.0f Node writes/s, %.0f µs of its CPU each (%d writers, the admin's merge patches of the status, %v)\n",
			probe.perSecond, probe.cpuPerWrite, probe.writers, o.ceiling)
		if policy != nil && o.policyCost {
			// The probe just run is the policy-bound half.
			cost, err := measurePolicyCost(ctx, c.Config, admin, policy, n, c.APIServer.Pid(), o.ceiling, probe.cpuPerWrite)
			if err != nil {
				return fmt.Errorf("the agents' policy's cost: %w", err)
			}
			fmt.Printf("    %v\n", cost)
		}
		if o.auth {
			// The change's writes are the agents': the floor is theirs.
			probe, err := agentCeiling(ctx, admin, c.Config, o.ceiling, c.APIServer.Pid())
			if err != nil {
				return err
			}
			writeFloor = probe.perSecond
			fmt.Printf("    as the agents write: %.0f Node writes/s, %.0f µs of its CPU each (%d writers taking turns over %d agents, each with its token bound to a Node of its own, its connection, its watch of the Node, and statusd's patches of its status through the admission policy, %v)\n",
				probe.perSecond, probe.cpuPerWrite, probe.writers, probe.writers*probeNodesPerWriter, o.ceiling)
		}
	}

	reconciler, metricsAddr, err := startReconciler(c, root, o.workers, append(reconcilerArgs(root, n, sec), o.reconcilerFlags...))
	if err != nil {
		return err
	}
	defer func() { _ = reconciler.Stop(10 * time.Second) }()

	dyn, err := dynamic.NewForConfig(adminCfg)
	if err != nil {
		return err
	}

	// First rollout: nothing assigned yet.
	start := time.Now()
	cm, err := admin.CoreV1().ConfigMaps(namespace).Create(ctx, configMap(1), metav1.CreateOptions{})
	if err != nil {
		return err
	}
	if err := createNodeConfig(ctx, dyn, o.maxInTrial, o.soak); err != nil {
		return err
	}
	first, err := watch.waitActive(ctx, cm.ResourceVersion, start, wait)
	if err != nil {
		return err
	}
	report("first rollout (nothing assigned before)", first)
	if syncs, err := readSyncs(metricsAddr); err == nil {
		fmt.Printf("    node syncs since the reconciler started: %.0f, %s\n", syncs.nodes, syncs.outcomes())
	}
	if err := watch.waitPromoted(ctx, cm.ResourceVersion, wait); err != nil {
		return err
	}

	// The figure: a config change on a fleet running its last-known-good.
	// The first rollout's trailing writes (status, events) land before
	// the count, not in the change's.
	writes := audit.NewLog(filepath.Join(c.Dir, "audit.log"))
	writesBefore, err := settledWrites(writes)
	if err != nil {
		return err
	}
	pids := fleetPids(hosts, c.APIServer.Pid(), c.Etcd.Pid(), reconciler.Pid())
	// What the settled fleet takes with nothing to do: the background a
	// change runs on.
	if o.idle > 0 {
		profile := ""
		if o.profiles != "" {
			profile = filepath.Join(o.profiles, "agents-idle.cpu.pprof")
			if hosts != nil {
				profile = filepath.Join(o.profiles, "harness-idle.cpu.pprof")
			}
		}
		idle, err := idleCPU(ctx, pids, o.idle, profile)
		if err != nil {
			return err
		}
		fmt.Printf("  idle before the change, CPU per second over %v: %v\n", o.idle, idle)
	}
	if o.auth && o.coldReviews {
		// A change seldom comes within a minute of the last one: every
		// agent then reviews the reconciler's token again, at every size.
		calls, err := readCalls(filepath.Join(c.Dir, "audit.log"))
		if err != nil {
			return err
		}
		if wait := time.Until(calls.tokenReviews.cachedUntil().Add(5 * time.Second)); wait > 0 {
			fmt.Printf("  waiting %v, until every agent's cached review has expired\n", wait.Round(time.Second))
			time.Sleep(wait)
		}
	}
	var stopProfiles func() error
	if o.profiles != "" {
		self := "agents.cpu.pprof"
		if hosts != nil {
			self = "harness.cpu.pprof" // the agents run in their hosts
		}
		if stopProfiles, err = startProfiles(ctx, o.profiles, self, metricsAddr, admin); err != nil {
			return err
		}
		if hosts != nil {
			if err := hosts.command(func(h *agentHost) string {
				return "profile " + filepath.Join(o.profiles, h.name()+".cpu.pprof")
			}); err != nil {
				return err
			}
			stopFleetProfiles := stopProfiles
			stopProfiles = func() error {
				err := hosts.command(func(*agentHost) string { return "stop-profile" })
				return errors.Join(stopFleetProfiles(), err)
			}
		}
	}
	cpuBefore, err := readCPU(pids)
	if err != nil {
		return err
	}
	syncsBefore, err := readSyncs(metricsAddr)
	if err != nil {
		return err
	}
	start = time.Now()
	next := configMap(2)
	next.ResourceVersion = cm.ResourceVersion
	if cm, err = admin.CoreV1().ConfigMaps(namespace).Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		return err
	}
	change, err := watch.waitActive(ctx, cm.ResourceVersion, start, wait)
	if err != nil {
		return err
	}
	promotedDuring := watch.promotedSoFar()
	cpuAfter, err := readCPU(pids)
	if err != nil {
		return err
	}
	target := ""
	if o.maxInTrial == "100%" && sel == n {
		target = changeTarget(n) // the targets are for a change at once
	}
	report("config change"+target, change)
	if syncsAfter, err := readSyncs(metricsAddr); err == nil {
		d := syncsAfter.since(syncsBefore)
		fmt.Printf("    node syncs: %.1f per node (%.0f in all, %s); NodeConfig status syncs: %.0f\n", d.nodes/float64(sel), d.nodes, d.outcomes(), d.nodeConfigs)
		fmt.Printf("    the reconciler's TokenRequests: %.0f on calls' paths, %.0f renewing ahead of use\n", d.tokensOnUse, d.tokensAhead)
	}
	// A soak shorter than the change puts the first nodes' promotions
	// (their agents', the API server's and the reconciler's share) in it.
	fmt.Printf("    promoted during it: %d of %d nodes (soak %v)\n", promotedDuring, sel, o.soak)
	cpu := cpuAfter.minus(cpuBefore)
	fmt.Printf("    CPU it took: %v (all active in %.2f x that)\n", cpu, change.all().Seconds()/cpu.floor())
	fmt.Printf("    of it in the kernel, with the minor page faults: %s\n", cpu.kernel())
	// One statusd write a node shows the new config active: the fleet's
	// change takes at least sel of them at the ceiling.
	var floor float64
	if writeFloor > 0 {
		floor = float64(sel) / writeFloor
		fmt.Printf("    the API server's floor for it: %.2f s (%d writes at %.0f/s); all active in %.2f x that\n",
			floor, sel, writeFloor, change.all().Seconds()/floor)
	}
	perThousand := change.all().Seconds() / (float64(sel) / 1000)
	fmt.Printf("    %.2f s per 1,000 nodes\n", perThousand)
	files := openFiles(reconciler.Pid(), c.APIServer.Pid(), hosts)
	if stopProfiles != nil {
		if err := stopProfiles(); err != nil {
			return err
		}
		fmt.Printf("  profiles in %s\n", o.profiles)
	}
	if err := watch.waitPromoted(ctx, cm.ResourceVersion, wait); err != nil {
		return err
	}
	writesAfter, err := settledWrites(writes)
	if err != nil {
		return err
	}
	fmt.Printf("  API writes for the change, to last-known-good: %.2f per node (%d in all; target <= 3)\n",
		float64(writesAfter-writesBefore)/float64(sel), writesAfter-writesBefore)
	calls, err := readCalls(filepath.Join(c.Dir, "audit.log"))
	if err != nil {
		return err
	}
	end := start.Add(change.all())
	minted, reviewed := calls.tokenRequests.between(start, end), calls.tokenReviews.between(start, end)
	fmt.Printf("  TokenRequests during the change (the audit log's): %d, %.2f per node (minted on a call's path, or renewed ahead of use)\n",
		minted, float64(minted)/float64(sel))
	fmt.Printf("  TokenReviews during the change (the audit log's): %d, %.2f per node (an agent reviews a token it holds no review of; it keeps one a minute)\n",
		reviewed, float64(reviewed)/float64(sel))
	if o.auth {
		// Every statusd writes as the install's agents do: its token
		// bound to its Node, through RBAC and the admission policy.
		patched := calls.agentPatches.between(start, end)
		fmt.Printf("  Node status patches during the change as %s, with a token bound to the Node: %d, %.2f per node\n",
			agentUser, patched, float64(patched)/float64(sel))
	}
	// An API server past its limit of requests in flight answers 429, and
	// the write counts above count the refused writes too.
	refused := calls.refused.between(start, end)
	fmt.Printf("  nodeconfig's requests the API server refused as too many (429) during the change: %d, %.2f per node\n",
		refused, float64(refused)/float64(sel))
	mem, err := memory(reconciler.Pid())
	if err != nil {
		return err
	}
	fmt.Printf("  reconciler memory: peak RSS %d MiB, now %d MiB (target <= 100 MiB)\n", mem.peak>>10, mem.rss>>10)
	fmt.Printf("    (now: anonymous %d MiB, pages of files %d MiB)\n", mem.anon>>10, mem.file>>10)
	if b, err := fetch("http://" + metricsAddr + "/metrics"); err == nil {
		fmt.Printf("    (%s)\n", runtimeMemory(b))
	}
	fmt.Printf("  open files after the change: %s\n", files)
	// A Go benchmark line, so benchstat and the bench table read it.
	// Without authentication the name says so: the figure is the
	// installed path's.
	path := ""
	if !o.auth {
		path = "/noauth"
	}
	if o.maxInTrial != "100%" {
		path += "/max-in-trial=" + o.maxInTrial
	}
	if o.soak != defaultSoak {
		path += "/soak=" + o.soak.String()
	}
	if o.tokensDue > 0 {
		path += "/tokens-due"
	}
	if sel < n {
		path += "/selected=" + strconv.Itoa(sel)
		if o.idleWithoutStatusd {
			path += "/idle-without-statusd"
		}
	}
	line := fmt.Sprintf("BenchmarkFleet/nodes=%d%s 1 %d ns/op %.2f all-active-s %.2f first-rollout-s %d p50-ms %d p99-ms %d reconciler-peak-rss-MiB %.2f writes/node/change",
		n, path, change.all().Nanoseconds(), change.all().Seconds(), first.all().Seconds(), change.pct(50).Milliseconds(), change.pct(99).Milliseconds(), mem.peak>>10,
		float64(writesAfter-writesBefore)/float64(sel))
	if writeFloor > 0 {
		line += fmt.Sprintf(" %.0f api-writes/s %.2f floor-s %.2f ratio-to-floor", writeFloor, floor, change.all().Seconds()/floor)
	}
	fmt.Printf("%s %.2f s-per-1000-nodes %.2f cpu-floor-s %.1f agents-cpu-s %.1f control-plane-cpu-s\n",
		line, perThousand, cpu.floor(), cpu.agents(), cpu.controlPlane())
	return nil
}

// openFiles counts the open files of the processes a fleet is limited by.
func openFiles(reconciler, apiServer int, hosts *agentHosts) string {
	count := func(pid int) string {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			return "?"
		}
		return strconv.Itoa(len(fds))
	}
	parts := []string{"this process " + count(os.Getpid())}
	if hosts != nil {
		var h []string
		for _, pid := range hosts.pids() {
			h = append(h, count(pid))
		}
		parts = append(parts, "agent hosts "+strings.Join(h, ", "))
	}
	parts = append(parts, "reconciler "+count(reconciler), "kube-apiserver "+count(apiServer))
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil {
		parts = append(parts, fmt.Sprintf("limit %d", lim.Cur))
	}
	return strings.Join(parts, "; ")
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }

// selection says which of a fleet's n nodes the NodeConfig selects: sel of
// them, spread evenly over the indices, so over every agent host.
type selection struct{ n, sel int }

func (s selection) selected(i int) bool { return (i+1)*s.sel/s.n > i*s.sel/s.n }

// withStatusd says which nodes run a statusd: all, or with idleWithout
// only the selected ones.
func (s selection) withStatusd(idleWithout bool) func(i int) bool {
	return func(i int) bool { return !idleWithout || s.selected(i) }
}

// forEach runs fn for 0 to n-1 with at most par at a time.
func forEach(n, par int, fn func(i int) error) error {
	var g errgroup.Group
	g.SetLimit(par)
	for i := range n {
		g.Go(func() error { return fn(i) })
	}
	return g.Wait()
}

// The fleet's kubelet config: the ConfigMap the NodeConfig names, and its key.
const (
	configMapName = "kubelet"
	configMapKey  = "config.yaml"
)

func configMap(v int) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: configMapName, Namespace: namespace},
		Data:       map[string]string{configMapKey: fmt.Sprintf("maxPods: %d\nlogging:\n  verbosity: 2\n", 100+v)},
	}
}

func createNodeConfig(ctx context.Context, dyn dynamic.Interface, maxInTrial string, soak time.Duration) error {
	_, err := dyn.Resource(v1alpha1.GroupVersionResource).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nodeconfig.io/v1alpha1", "kind": "NodeConfig",
		"metadata": map[string]any{"name": "fleet"},
		"spec": map[string]any{
			"nodeSelector": map[string]any{"matchLabels": map[string]any{label: "bench"}},
			"source":       map[string]any{"configMap": map[string]any{"namespace": namespace, "name": configMapName, "key": configMapKey}},
			"soakSeconds":  int64(soak.Seconds()),
			"rollout":      map[string]any{"maxInTrial": maxInTrial},
		},
	}}, metav1.CreateOptions{})
	return err
}

func startReconciler(c *cluster.Cluster, root string, workers int, agentArgs []string) (p *proc.Process, metricsAddr string, err error) {
	bin, err := proc.Binary("reconciler")
	if err != nil {
		return nil, "", err
	}
	addr, err := proc.FreeAddr()
	if err != nil {
		return nil, "", err
	}
	if metricsAddr, err = proc.FreeAddr(); err != nil {
		return nil, "", err
	}
	p, err = proc.Start("reconciler", bin, append([]string{
		"--listen", addr, "--metrics-addr", metricsAddr, "--profiling", "--kubeconfig", c.Kubeconfig, "--leader-elect=false",
		"--workers", strconv.Itoa(workers),
	}, agentArgs...), filepath.Join(root, "reconciler.log"))
	return p, metricsAddr, err
}

// startProfiles records CPU profiles of the reconciler, this process (into
// self) and the API server until the returned stop, which also takes the
// reconciler's heap profile.
func startProfiles(ctx context.Context, dir, self, reconcilerMetrics string, admin kubernetes.Interface) (stop func() error, err error) {
	stopSelf, err := startCPUProfile(filepath.Join(dir, self))
	if err != nil {
		return nil, err
	}
	const seconds = "12"
	var g errgroup.Group
	save := func(name string, get func() ([]byte, error)) {
		g.Go(func() error {
			b, err := get()
			if err != nil {
				return fmt.Errorf("%s profile: %w", name, err)
			}
			return os.WriteFile(filepath.Join(dir, name), b, 0o644)
		})
	}
	httpGet := func(url string) func() ([]byte, error) {
		return func() ([]byte, error) { return fetch(url) }
	}
	save("reconciler.cpu.pprof", httpGet("http://"+reconcilerMetrics+"/debug/pprof/profile?seconds="+seconds))
	save("apiserver.cpu.pprof", func() ([]byte, error) {
		return admin.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", seconds).DoRaw(ctx)
	})
	return func() error {
		stopSelf()
		err := g.Wait()
		if b, herr := httpGet("http://" + reconcilerMetrics + "/debug/pprof/heap")(); herr == nil {
			herr = os.WriteFile(filepath.Join(dir, "reconciler.heap.pprof"), b, 0o644)
			err = errors.Join(err, herr)
		} else {
			err = errors.Join(err, herr)
		}
		return err
	}, nil
}

// activeWatch follows every Node's config-status annotation and notes when
// each first shows the expected config active and last-known-good. Counts
// are kept as events arrive: rescanning every node on every event was the
// harness's own O(n²), a fifth of the CPU at 5,000 nodes.
type activeWatch struct {
	client kubernetes.Interface
	// n nodes report (run a statusd); sel of them are selected.
	n, sel int
	mu     sync.Mutex
	cond   *sync.Cond
	status map[string]corev1.NodeConfigStatus
	seen   map[string]time.Time // node -> when its status last changed
	// The expected config and who shows it.
	want     string
	activeAt map[string]time.Time
	promoted map[string]bool
}

func newActiveWatch(client kubernetes.Interface, n, sel int) *activeWatch {
	w := &activeWatch{client: client, n: n, sel: sel, status: map[string]corev1.NodeConfigStatus{}, seen: map[string]time.Time{}}
	w.cond = sync.NewCond(&w.mu)
	w.expectLocked("")
	return w
}

func (w *activeWatch) run(ctx context.Context) {
	factory := informers.NewSharedInformerFactory(w.client, 0)
	note := func(obj any) {
		node, ok := obj.(*corev1.Node)
		if !ok {
			return
		}
		if _, fleet := node.Labels[label]; !fleet {
			return // the write probe's Nodes are not the fleet's
		}
		raw, ok := node.Annotations[v1alpha1.NodeAnnotationConfigStatus]
		if !ok {
			return
		}
		var st corev1.NodeConfigStatus
		if json.Unmarshal([]byte(raw), &st) != nil {
			return
		}
		now := time.Now()
		w.mu.Lock()
		w.status[node.Name] = st
		w.seen[node.Name] = now
		w.countLocked(node.Name, st, now)
		w.cond.Broadcast()
		w.mu.Unlock()
	}
	_, _ = factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: note, UpdateFunc: func(_, obj any) { note(obj) },
	})
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
}

func (w *activeWatch) countLocked(name string, st corev1.NodeConfigStatus, at time.Time) {
	if w.want == "" {
		return
	}
	if _, ok := w.activeAt[name]; !ok && rv(st.Active) == w.want {
		w.activeAt[name] = at
	}
	if rv(st.LastKnownGood) == w.want {
		w.promoted[name] = true
	}
}

// expectLocked starts counting for a new config; statuses already showing
// it count with the time they were seen.
func (w *activeWatch) expectLocked(want string) {
	w.want, w.activeAt, w.promoted = want, map[string]time.Time{}, map[string]bool{}
	for name, st := range w.status {
		w.countLocked(name, st, w.seen[name])
	}
}

// wait blocks until done holds or timeout.
func (w *activeWatch) wait(ctx context.Context, timeout time.Duration, what string, done func() (bool, string)) error {
	wake := func() { w.mu.Lock(); w.cond.Broadcast(); w.mu.Unlock() }
	deadline := time.AfterFunc(timeout, wake)
	defer deadline.Stop()
	defer context.AfterFunc(ctx, wake)()
	end := time.Now().Add(timeout)
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		ok, progress := done()
		if ok {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("waiting for %s (%s): %w", what, progress, context.Cause(ctx))
		}
		if time.Now().After(end) {
			return fmt.Errorf("timed out after %v waiting for %s: %s", timeout, what, progress)
		}
		w.cond.Wait()
	}
}

func (w *activeWatch) waitReported(ctx context.Context, timeout time.Duration) error {
	return w.wait(ctx, timeout, "every node's first status", func() (bool, string) {
		return len(w.status) == w.n, fmt.Sprintf("%d of %d reported", len(w.status), w.n)
	})
}

func rv(src *corev1.NodeConfigSource) string {
	if src == nil || src.ConfigMap == nil {
		return ""
	}
	return src.ConfigMap.ResourceVersion
}

// latencies are per-node times from the change to "active" on the Node.
type latencies []time.Duration

func (l latencies) pct(p int) time.Duration {
	s := slices.Clone(l)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func (l latencies) all() time.Duration { return slices.Max(l) }

func (w *activeWatch) waitActive(ctx context.Context, want string, start time.Time, timeout time.Duration) (latencies, error) {
	w.mu.Lock()
	w.expectLocked(want)
	w.mu.Unlock()
	err := w.wait(ctx, timeout, "every node active on "+want, func() (bool, string) {
		return len(w.activeAt) == w.sel, fmt.Sprintf("%d of %d active", len(w.activeAt), w.sel)
	})
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(latencies, 0, w.sel)
	for _, at := range w.activeAt {
		out = append(out, at.Sub(start))
	}
	return out, nil
}

// promotedSoFar is how many nodes show the expected config promoted.
func (w *activeWatch) promotedSoFar() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.promoted)
}

func (w *activeWatch) waitPromoted(ctx context.Context, want string, timeout time.Duration) error {
	return w.wait(ctx, timeout, "every node promoted to "+want, func() (bool, string) {
		return len(w.promoted) == w.sel, fmt.Sprintf("%d of %d promoted", len(w.promoted), w.sel)
	})
}

func report(what string, l latencies) {
	fmt.Printf("  %s: all %d active in %v (per node p50 %v, p99 %v)\n", what, len(l),
		l.all().Round(time.Millisecond), l.pct(50).Round(time.Millisecond), l.pct(99).Round(time.Millisecond))
}

// callTimes are when the API server received calls of one kind, in the
// audit log's order.
type callTimes []time.Time

// changeCalls are when the API server received the calls a change is made
// of, read in one pass over the audit log: the reconciler's TokenRequests
// (its tokens for the agents, minted or renewed), the agents' TokenReviews
// of them, and the agents' Node status patches with their own tokens, each
// answered (created, or patched); and the requests of nodeconfig's clients
// it refused as too many (429), which they retry.
type changeCalls struct{ tokenRequests, tokenReviews, agentPatches, refused callTimes }

func readCalls(auditLog string) (changeCalls, error) {
	var c changeCalls
	err := audit.Each(auditLog, func(e audit.Event) {
		created, patched := e.Verb == "create" && e.ResponseStatus.Code == http.StatusCreated, e.Verb == "patch" && e.ResponseStatus.Code == http.StatusOK
		switch {
		case e.ResponseStatus.Code == http.StatusTooManyRequests && e.Nodeconfigs():
			c.refused = append(c.refused, e.RequestReceived)
		case created && e.IsTokenRequest() && e.ObjectRef.Name == reconcilerAccount:
			c.tokenRequests = append(c.tokenRequests, e.RequestReceived)
		case created && e.ObjectRef.Resource == "tokenreviews":
			c.tokenReviews = append(c.tokenReviews, e.RequestReceived)
		case patched && e.ObjectRef.Resource == "nodes" && e.ObjectRef.Subresource == "status" && e.User.Username == agentUser:
			c.agentPatches = append(c.agentPatches, e.RequestReceived)
		}
	})
	return c, err
}

// between counts the calls from from to to.
func (r callTimes) between(from, to time.Time) int {
	n := 0
	for _, t := range r {
		if !t.Before(from) && !t.After(to) {
			n++
		}
	}
	return n
}

// cachedUntil is, for reviews, when the last one's answer leaves its
// agent's cache: a change after it finds every agent reviewing its token
// again.
func (r callTimes) cachedUntil() time.Time {
	var last time.Time
	for _, t := range r {
		if t.After(last) {
			last = t
		}
	}
	return last.Add(authn.ReviewCacheTTL)
}

// settledWrites counts nodeconfig's API writes, lease renewals aside, once
// they have stopped coming (the e2e tests' wait, audit.Settle quiet).
func settledWrites(l *audit.Log) (int, error) {
	w, err := l.Settled(audit.Settle, 2*time.Minute)
	return w.Total(), err
}

// resident is a process's resident set in KiB: its peak, now, and now's
// anonymous memory and pages of files (its binary's, mostly).
type resident struct{ peak, rss, anon, file int64 }

func memory(pid int) (resident, error) {
	proc, err := procfs.NewProc(pid)
	if err != nil {
		return resident{}, err
	}
	st, err := proc.NewStatus()
	if err != nil {
		return resident{}, err
	}
	return resident{peak: int64(st.VmHWM >> 10), rss: int64(st.VmRSS >> 10), anon: int64(st.RssAnon >> 10), file: int64(st.RssFile >> 10)}, nil
}

// runtimeMemory summarises the Go runtime's memory gauges of a /metrics page.
func runtimeMemory(page []byte) string {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, name := range []string{"go_goroutines", "go_memstats_heap_inuse_bytes", "go_memstats_heap_idle_bytes",
		"go_memstats_heap_released_bytes", "go_memstats_stack_inuse_bytes", "go_memstats_sys_bytes"} {
		if f, ok := families[name]; ok && len(f.GetMetric()) == 1 {
			v, unit := f.GetMetric()[0].GetGauge().GetValue(), ""
			if name != "go_goroutines" {
				v, unit = v/(1<<20), " MiB"
			}
			parts = append(parts, fmt.Sprintf("%s %.0f%s", strings.TrimPrefix(name, "go_memstats_"), v, unit))
		}
	}
	return strings.Join(parts, ", ")
}

// syncCounts are the reconciler's syncs so far (a node sync asks the
// node's agent, a NodeConfig sync counts its selected nodes' states; the
// failed node syncs are retried with backoff, a rollout's stragglers; the
// waiting ones asked no agent, their ConfigMap not listed yet), and its
// TokenRequests for the agents' tokens: on a call's path, and renewed
// ahead in the background.
type syncCounts struct {
	nodes, nodesFailed, nodesWaited, nodeConfigs, tokensOnUse, tokensAhead float64
}

// since is what was counted after before.
func (s syncCounts) since(before syncCounts) syncCounts {
	return syncCounts{
		nodes: s.nodes - before.nodes, nodesFailed: s.nodesFailed - before.nodesFailed, nodesWaited: s.nodesWaited - before.nodesWaited,
		nodeConfigs: s.nodeConfigs - before.nodeConfigs, tokensOnUse: s.tokensOnUse - before.tokensOnUse, tokensAhead: s.tokensAhead - before.tokensAhead,
	}
}

// outcomes says how the node syncs that did not simply succeed ended.
func (s syncCounts) outcomes() string {
	return fmt.Sprintf("%.0f failed and retried with backoff, %.0f waited for their ConfigMap's first listing", s.nodesFailed, s.nodesWaited)
}

func readSyncs(metricsAddr string) (syncCounts, error) {
	page, err := fetch("http://" + metricsAddr + "/metrics")
	if err != nil {
		return syncCounts{}, err
	}
	return parseSyncs(page)
}

// parseSyncs reads syncCounts from the reconciler's /metrics page.
func parseSyncs(page []byte) (syncCounts, error) {
	var n syncCounts
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		return n, err
	}
	for _, m := range families["nodeconfig_agent_token_requests_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			switch {
			case l.GetName() != "when":
			case l.GetValue() == "on_use":
				n.tokensOnUse += m.GetCounter().GetValue()
			case l.GetValue() == "ahead":
				n.tokensAhead += m.GetCounter().GetValue()
			}
		}
	}
	for _, m := range families["nodeconfig_reconciler_syncs_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		v := m.GetCounter().GetValue()
		switch labels["queue"] {
		case "nodes":
			n.nodes += v
			switch labels["result"] {
			case "error":
				n.nodesFailed += v
			case "waiting":
				n.nodesWaited += v
			}
		case "nodeconfigs":
			n.nodeConfigs += v
		}
	}
	return n, nil
}

func fetch(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// raiseFileLimit raises the soft open-file limit to the hard one, which is
// as far as a process without CAP_SYS_RESOURCE may go, and says so when
// that is less than want.
func raiseFileLimit(want int) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Fprintf(os.Stderr, "fleet: open file limit: %v\n", err)
		return
	}
	// Set even when Go raised it already at start: that raise is undone
	// in child processes, a Setrlimit of our own is not, and the API
	// server and the reconciler need it too.
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Fprintf(os.Stderr, "fleet: cannot raise the open file limit to %d (%v)\n", lim.Max, err)
		return
	}
	if lim.Cur < uint64(want) {
		fmt.Fprintf(os.Stderr, "fleet: the open file limit is %d, about %d wanted; this fleet may run out (fewer -agents-per-process, or a higher hard limit)\n", lim.Cur, want)
	}
}

// changeTarget names the target for a fleet of n, where it has one.
func changeTarget(n int) string {
	switch n {
	case 1000:
		return " (target: all active <= 10 s)"
	case 5000:
		return " (target: all active <= 15 s)"
	}
	return ""
}
