package main

import (
	"fmt"
	"strconv"
	"time"

	"nodeconfig.io/test/framework/audit"
)

// figures are what the phases measure, for the lines that report them and
// the benchmark line that sums them up.
type figures struct {
	writeFloor     float64 // Node writes a second: the change's floor
	first, change  latencies
	changeStart    time.Time
	syncsBefore    syncCounts // the reconciler's, before the change
	promotedDuring int        // nodes promoted before the change ended
	cpu            cpuUse     // what the change took
	etcd           etcdWrites // what etcd wrote for it
	files          string     // open files right after the change
	writes         *audit.Log
	writesBefore   int
	changeWrites   int // nodeconfig's API writes for the change
	mem            resident
}

// floor is the API server's floor under the change, given a measured
// ceiling: one statusd write a node shows the new config active, so the
// change takes at least sel of them at the ceiling.
func (r *fleetRun) floor() float64 { return float64(r.sel) / r.writeFloor }

// perThousand is the change's time per 1,000 selected nodes.
func (r *fleetRun) perThousand() float64 {
	return r.change.all().Seconds() / (float64(r.sel) / 1000)
}

// reportChange prints the change's times, the reconciler's syncs and the
// CPU it took, and counts the open files right after it.
func (r *fleetRun) reportChange() error {
	target := ""
	if r.o.maxInTrial == "100%" && r.sel == r.n {
		target = changeTarget(r.n) // the targets are for a change at once
	}
	report("config change"+target, r.change)
	if syncsAfter, err := readSyncs(r.metricsAddr); err == nil {
		d := syncsAfter.since(r.syncsBefore)
		fmt.Printf("    node syncs: %.1f per node (%.0f in all, %s); NodeConfig status syncs: %.0f\n", d.nodes/float64(r.sel), d.nodes, d.outcomes(), d.nodeConfigs)
		fmt.Printf("    the reconciler's TokenRequests: %.0f on calls' paths, %.0f renewing ahead of use\n", d.tokensOnUse, d.tokensAhead)
	}
	// A soak shorter than the change puts the first nodes' promotions
	// (their agents', the API server's and the reconciler's share) in it.
	fmt.Printf("    promoted during it: %d of %d nodes (soak %v)\n", r.promotedDuring, r.sel, r.o.soak)
	fmt.Printf("    CPU it took: %v (all active in %.2f x that)\n", r.cpu, r.change.all().Seconds()/r.cpu.floor())
	fmt.Printf("    of it in the kernel, with the minor page faults: %s\n", r.cpu.kernel())
	perNode := func(seconds float64) float64 { return seconds * 1000 / float64(r.sel) }
	fmt.Printf("    the control plane's CPU per node: %.2f ms (API server %.2f ms, etcd %.2f ms, reconciler %.2f ms; target <= 5 ms with kubelet-like Nodes)\n",
		perNode(r.cpu.controlPlane()), perNode(r.cpu.cpu[partAPIServer]), perNode(r.cpu.cpu[partEtcd]), perNode(r.cpu.cpu[partReconciler]))
	fmt.Printf("    etcd wrote %.1f MiB to its log for it, %.1f kB per node (values put: %.1f kB per node)\n",
		r.etcd.wal/(1<<20), r.etcd.wal/1000/float64(r.sel), r.etcd.put/1000/float64(r.sel))
	if r.writeFloor > 0 {
		floor := r.floor()
		fmt.Printf("    the API server's floor for it: %.2f s (%d writes at %.0f/s); all active in %.2f x that\n",
			floor, r.sel, r.writeFloor, r.change.all().Seconds()/floor)
	}
	fmt.Printf("    %.2f s per 1,000 nodes\n", r.perThousand())
	r.files = openFiles(r.reconciler.Pid(), r.c.APIServer.Pid(), r.hosts)
	return nil
}

// reportAPICalls waits for the change's promotions and its writes to
// settle, then prints nodeconfig's API writes for it and, from the audit
// log, the calls made during it.
func (r *fleetRun) reportAPICalls() error {
	if err := r.watch.waitPromoted(r.ctx, r.cm.ResourceVersion, r.wait); err != nil {
		return err
	}
	writesAfter, err := settledWrites(r.writes)
	if err != nil {
		return err
	}
	r.changeWrites = writesAfter - r.writesBefore
	fmt.Printf("  API writes for the change, to last-known-good: %.2f per node (%d in all; target <= 3)\n",
		float64(r.changeWrites)/float64(r.sel), r.changeWrites)
	calls, err := readCalls(r.auditLog())
	if err != nil {
		return err
	}
	start, end := r.changeStart, r.changeStart.Add(r.change.all())
	minted, reviewed := calls.tokenRequests.between(start, end), calls.tokenReviews.between(start, end)
	fmt.Printf("  TokenRequests during the change (the audit log's): %d, %.2f per node (minted on a call's path, or renewed ahead of use)\n",
		minted, float64(minted)/float64(r.sel))
	fmt.Printf("  TokenReviews during the change (the audit log's): %d, %.2f per node (an agent reviews a token it holds no review of; it keeps one a minute)\n",
		reviewed, float64(reviewed)/float64(r.sel))
	if r.o.auth {
		// Every statusd writes as the install's agents do: its token
		// bound to its Node, through RBAC and the admission policy.
		patched := calls.agentPatches.between(start, end)
		fmt.Printf("  Node status patches during the change as %s, with a token bound to the Node: %d, %.2f per node\n",
			statusUser, patched, float64(patched)/float64(r.sel))
	}
	// An API server past its limit of requests in flight answers 429, and
	// the write counts above count the refused writes too.
	refused := calls.refused.between(start, end)
	fmt.Printf("  nodeconfig's requests the API server refused as too many (429) during the change: %d, %.2f per node\n",
		refused, float64(refused)/float64(r.sel))
	return nil
}

// reportMemory prints the reconciler's memory and the open files counted
// after the change.
func (r *fleetRun) reportMemory() error {
	var err error
	if r.mem, err = memory(r.reconciler.Pid()); err != nil {
		return err
	}
	fmt.Printf("  reconciler memory: peak RSS %d MiB, now %d MiB (target <= 100 MiB)\n", r.mem.peak>>10, r.mem.rss>>10)
	fmt.Printf("    (now: anonymous %d MiB, pages of files %d MiB)\n", r.mem.anon>>10, r.mem.file>>10)
	if b, err := fetch("http://" + r.metricsAddr + "/metrics"); err == nil {
		fmt.Printf("    (%s)\n", runtimeMemory(b))
	}
	if err := r.peak.report(r.o.profiles); err != nil {
		return err
	}
	fmt.Printf("  open files after the change: %s\n", r.files)
	return nil
}

// reportBenchmark prints the run's figures as a Go benchmark line, so
// benchstat and the bench table (make bench-table) read it.
func (r *fleetRun) reportBenchmark() error {
	line := fmt.Sprintf("%s 1 %d ns/op %.2f all-active-s %.2f first-rollout-s %d p50-ms %d p99-ms %d reconciler-peak-rss-MiB %.2f writes/node/change",
		r.benchName(), r.change.all().Nanoseconds(), r.change.all().Seconds(), r.first.all().Seconds(), r.change.pct(50).Milliseconds(), r.change.pct(99).Milliseconds(), r.mem.peak>>10,
		float64(r.changeWrites)/float64(r.sel))
	if r.writeFloor > 0 {
		floor := r.floor()
		line += fmt.Sprintf(" %.0f api-writes/s %.2f floor-s %.2f ratio-to-floor", r.writeFloor, floor, r.change.all().Seconds()/floor)
	}
	if floor := r.cpu.floor(); floor > 0 {
		line += fmt.Sprintf(" %.2f ratio-to-cpu-floor", r.change.all().Seconds()/floor)
	}
	if change := r.change.all().Seconds(); change > 0 {
		line += fmt.Sprintf(" %.2f first-rollout-x-change", r.first.all().Seconds()/change)
	}
	fmt.Printf("%s %.2f s-per-1000-nodes %.2f cpu-floor-s %.2f control-plane-cpu-floor-s %.1f agents-cpu-s %.1f control-plane-cpu-s %.2f control-plane-cpu-ms/node %.1f etcd-log-kB/node\n",
		line, r.perThousand(), r.cpu.floor(), r.cpu.controlPlaneFloor(), r.cpu.agents(), r.cpu.controlPlane(),
		r.cpu.controlPlane()*1000/float64(r.sel), r.etcd.wal/1000/float64(r.sel))
	return nil
}

// checkSyncs fails the run, with -fail-on-failed-sync, when any node
// sync failed since the reconciler started: the first rollout, the change
// and the promotions after it.
func (r *fleetRun) checkSyncs() error {
	if !r.o.failOnFailedSync {
		return nil
	}
	s, err := readSyncs(r.metricsAddr)
	if err != nil {
		return fmt.Errorf("read the reconciler's syncs: %w", err)
	}
	return s.noneFailed()
}

// benchName names the benchmark after the options that change its
// figures, so that the bench table keeps their runs apart. Without
// authentication the name says so: the plain name is the installed
// path's.
func (p plan) benchName() string {
	path := ""
	if !p.o.auth {
		path = "/noauth"
	}
	if p.o.maxInTrial != "100%" {
		path += "/max-in-trial=" + p.o.maxInTrial
	}
	if p.o.soak != defaultSoak {
		path += "/soak=" + p.o.soak.String()
	}
	if p.o.tokensDue > 0 {
		path += "/tokens-due"
	}
	if p.o.failover {
		path += "/failover"
	}
	if p.o.kubeletLikeNodes {
		path += "/kubelet-like-nodes"
	}
	if p.sel < p.n {
		path += "/selected=" + strconv.Itoa(p.sel)
		if p.o.idleWithoutStatusd {
			path += "/idle-without-statusd"
		}
	}
	return fmt.Sprintf("BenchmarkFleet/nodes=%d%s", p.n, path)
}

func report(what string, l latencies) {
	fmt.Printf("  %s: all %d active in %v (per node p50 %v, p99 %v)\n", what, len(l),
		l.all().Round(time.Millisecond), l.pct(50).Round(time.Millisecond), l.pct(99).Round(time.Millisecond))
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
