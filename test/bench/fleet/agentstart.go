package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// startNodeAgents starts every node's agents, in this process or, past
// -agents-per-process nodes, in child processes, and waits until every
// statusd has reported its node's first status.
func (r *fleetRun) startNodeAgents() error {
	t0 := time.Now()
	if r.hosted {
		hosts, err := startAgentHosts(r.ctx, r.cancel, r.c.Kubeconfig, r.root, r.n, r.o.perProcess, r.o.fsync, r.sec, r.chosen, r.o.idleWithoutStatusd, r.wait)
		if err != nil {
			return err
		}
		r.hosts = hosts
		r.onStop(hosts.stop)
		fmt.Printf("  %d agent host processes of at most %d nodes each serving\n", len(hosts.hosts), r.o.perProcess)
	} else if err := r.startAgentsHere(); err != nil {
		return err
	}
	if err := r.watch.waitReported(r.ctx, r.wait); err != nil {
		return err
	}
	fmt.Printf("  %d agents started and %d reporting in %v\n", r.n, r.reporting, since(t0))
	return nil
}

// startAgentsHere starts every node's agents in this process, logging
// their warnings to agents.log.
func (r *fleetRun) startAgentsHere() error {
	logFile, err := os.Create(filepath.Join(r.root, "agents.log"))
	if err != nil {
		return err
	}
	r.onStop(func() { _ = logFile.Close() })
	log := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// The statusds stop before their checkpointds, as in a host.
	agentsCtx, stopStatusds := context.WithCancel(r.ctx)
	a, err := startAgents(agentsCtx, r.c.Config, r.root, 0, r.n, r.o.fsync, r.sec, r.chosen.withStatusd(r.o.idleWithoutStatusd), log)
	// The agents started before a failure stop too.
	r.onStop(func() { stopStatusds(); a.stop() })
	return err
}
