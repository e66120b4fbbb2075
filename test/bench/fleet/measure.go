package main

import (
	"fmt"
	"path/filepath"
	"time"

	"nodeconfig.io/test/framework/audit"
)

// measureCeilings measures the API server's Node write ceiling, with the
// agents watching their Nodes, before anything of nodeconfig's writes:
// the floor under the change's time.
func (r *fleetRun) measureCeilings() error {
	if r.o.ceiling <= 0 {
		return nil
	}
	probe, err := adminCeiling(r.ctx, r.c.Config, r.n, r.o.ceiling, r.c.APIServer.Pid())
	if err != nil {
		return err
	}
	r.writeFloor = probe.perSecond
	fmt.Printf("  API server write ceiling: %.0f Node writes/s, %.0f µs of its CPU each (%d writers, the admin's merge patches of the status, %v)\n",
		probe.perSecond, probe.cpuPerWrite, probe.writers, r.o.ceiling)
	if r.policy != nil && r.o.policyCost {
		// The probe just run is the policy-bound half.
		cost, err := measurePolicyCost(r.ctx, r.c.Config, r.admin, r.policy, r.n, r.c.APIServer.Pid(), r.o.ceiling, probe.cpuPerWrite)
		if err != nil {
			return fmt.Errorf("the agents' policy's cost: %w", err)
		}
		fmt.Printf("    %v\n", cost)
	}
	if r.o.auth {
		// The change's writes are the agents': the floor is theirs.
		probe, err := agentCeiling(r.ctx, r.admin, r.c.Config, r.o.kubeletLikeNodes, r.o.ceiling, r.c.APIServer.Pid())
		if err != nil {
			return err
		}
		r.writeFloor = probe.perSecond
		nodes := "Node"
		if r.o.kubeletLikeNodes {
			nodes = "kubelet-like Node"
		}
		fmt.Printf("    as the agents write: %.0f Node writes/s, %.0f µs of its CPU each (%d writers taking turns over %d agents, each with its token bound to a %s of its own, its connection, its watch of the Node, and statusd's patches of its status through the admission policy, %v)\n",
			probe.perSecond, probe.cpuPerWrite, probe.writers, probe.writers*probeNodesPerWriter, nodes, r.o.ceiling)
	}
	return nil
}

// settle brings the fleet, after its first rollout, to where a change
// finds it: the first rollout's trailing writes (status, events) landed
// and counted before the change's, the CPU the idle fleet takes measured
// as the background the change runs on, and, with -cold-reviews, every
// agent's cached token review expired.
func (r *fleetRun) settle() error {
	r.writes = audit.NewLog(r.auditLog())
	var err error
	if r.writesBefore, err = settledWrites(r.writes); err != nil {
		return err
	}
	r.pids = fleetPids(r.hosts, r.c.APIServer.Pid(), r.c.Etcd.Pid(), r.reconciler.Pid())
	if err := r.measureIdle(); err != nil {
		return err
	}
	return r.waitColdReviews()
}

// measureIdle measures the CPU the settled fleet takes for -idle.
func (r *fleetRun) measureIdle() error {
	if r.o.idle <= 0 {
		return nil
	}
	profile := ""
	if r.o.profiles != "" {
		profile = filepath.Join(r.o.profiles, "agents-idle.cpu.pprof")
		if r.hosts != nil {
			profile = filepath.Join(r.o.profiles, "harness-idle.cpu.pprof")
		}
	}
	idle, err := idleCPU(r.ctx, r.pids, r.o.idle, profile)
	if err != nil {
		return err
	}
	fmt.Printf("  idle before the change, CPU per second over %v: %v\n", r.o.idle, idle)
	return nil
}

// waitColdReviews waits, with -auth and -cold-reviews, until every
// agent's cached review of its token has expired: a change seldom comes
// within a minute of the last one, so every agent then reviews the
// reconciler's token again, at every size.
func (r *fleetRun) waitColdReviews() error {
	if !r.o.auth || !r.o.coldReviews {
		return nil
	}
	calls, err := readCalls(r.auditLog())
	if err != nil {
		return err
	}
	if wait := time.Until(calls.tokenReviews.cachedUntil().Add(5 * time.Second)); wait > 0 {
		fmt.Printf("  waiting %v, until every agent's cached review has expired\n", wait.Round(time.Second))
		time.Sleep(wait)
	}
	return nil
}

// auditLog is the API server's audit log, where the calls are counted.
func (r *fleetRun) auditLog() string { return filepath.Join(r.c.Dir, "audit.log") }
