package main

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// failOver, with -failover, makes one more change on the settled fleet
// and kills the leader (SIGKILL, as a crashed node or an OOM kill would)
// once half the selected nodes show it active. The standby takes the Lease
// when it expires and builds its view anew; the figure is the time from
// the kill until it has synced every node and every node shows the change
// active, against the warm change's time of the same run.
func (r *fleetRun) failOver() error {
	if !r.o.failover {
		return nil
	}
	// As the change did, the agents review the tokens they are sent anew.
	if err := r.waitColdReviews(); err != nil {
		return err
	}
	start := time.Now()
	next := configMap(3)
	next.ResourceVersion = r.cm.ResourceVersion
	var err error
	if r.cm, err = r.admin.CoreV1().ConfigMaps(namespace).Update(r.ctx, next, metav1.UpdateOptions{}); err != nil {
		return err
	}
	r.watch.expect(r.cm.ResourceVersion)
	if _, err := r.watch.waitActiveCount(r.ctx, start, r.wait, (r.sel+1)/2); err != nil {
		return err
	}
	pids := fleetPids(r.hosts, r.c.APIServer.Pid(), r.c.Etcd.Pid(), r.standby.Pid())
	cpuAtKill, err := readCPU(pids)
	if err != nil {
		return err
	}
	r.reconciler.Kill()
	killed := time.Now()
	activeAtKill := r.watch.activeSoFar()
	if err := waitLeading(r.ctx, r.standbyMetrics, r.wait); err != nil {
		return fmt.Errorf("the standby taking the lease: %w", err)
	}
	leaseAfter := since(killed)
	cpuAtLead, err := readCPU(pids)
	if err != nil {
		return err
	}
	// The new leader's first pass is what the profiles show.
	stopProfile, err := r.profileLeader("failover", "the fail-over", r.standbyMetrics)
	if err != nil {
		return err
	}
	synced := make(chan error, 1)
	var syncedAfter time.Duration
	go func() {
		err := r.waitSyncedEveryNode(r.wait)
		syncedAfter = since(killed)
		synced <- err
	}()
	active, err := r.watch.waitActiveCount(r.ctx, start, r.wait, r.sel)
	if err != nil {
		return err
	}
	activeAfter := active.all() - killed.Sub(start)
	if err := <-synced; err != nil {
		return err
	}
	cpuDone, err := readCPU(pids)
	if err != nil {
		return err
	}
	cpu, cpuLed := cpuDone.minus(cpuAtKill), cpuDone.minus(cpuAtLead)
	// Below this the fail-over cannot fall here: the Lease's wait, then
	// the new leader's work spread over every core.
	floor := leaseAfter.Seconds() + cpuLed.floor()
	if err := stopProfile(); err != nil {
		return err
	}
	took := max(activeAfter, syncedAfter)
	change := r.change.all()
	fmt.Printf("  fail-over: the leader killed %v into a change, %d of %d nodes active on it\n", killed.Sub(start).Round(time.Millisecond), activeAtKill, r.sel)
	fmt.Printf("    the standby led %v after the kill; every node active %v after it, every node synced by the new leader %v after it\n",
		leaseAfter.Round(time.Millisecond), activeAfter.Round(time.Millisecond), syncedAfter.Round(time.Millisecond))
	fmt.Printf("    fail-over done %v after the kill, %.2f x the change's %v (%v of it the new leader's, %.2f x; target <= 1.5 x)\n",
		took.Round(time.Millisecond), took.Seconds()/change.Seconds(), change.Round(time.Millisecond),
		(took - leaseAfter).Round(time.Millisecond), (took-leaseAfter).Seconds()/change.Seconds())
	fmt.Printf("    CPU from the kill until done: %v; from the new leader's start: %v (its part in %.2f x that)\n", cpu, cpuLed, (took-leaseAfter).Seconds()/cpuLed.floor())
	fmt.Printf("    the fail-over's floor here: the Lease's %v and the new leader's CPU over these cores, %.2f s, %.2f x the change\n", leaseAfter.Round(time.Millisecond), floor, floor/change.Seconds())
	if s, err := readSyncs(r.standbyMetrics); err == nil {
		fmt.Printf("    the new leader's node syncs: %.0f (%s); TokenRequests %.0f while standing by, %.0f prefetched, %.0f on calls' paths, %.0f ahead\n",
			s.nodes, s.outcomes(), s.tokensStandby, s.tokensPrefetched, s.tokensOnUse, s.tokensAhead)
	}
	fmt.Printf("BenchmarkFleetFailover/nodes=%d 1 %d ns/op %.2f failover-s %.2f failover-x-change %.2f lease-wait-s %.2f failover-all-active-s %.2f failover-synced-s %.2f change-s %.2f failover-floor-x-change\n",
		r.n, took.Nanoseconds(), took.Seconds(), took.Seconds()/change.Seconds(), leaseAfter.Seconds(), activeAfter.Seconds(), syncedAfter.Seconds(), change.Seconds(), floor/change.Seconds())
	return nil
}

// waitSyncedEveryNode waits until the standby, leading, has synced as
// many nodes as are selected (successfully: not failed, not waiting for
// its ConfigMap's listing) and its work queue is empty: its first pass over
// the fleet is done.
func (r *fleetRun) waitSyncedEveryNode(timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(r.ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		page, err := fetch("http://" + r.standbyMetrics + "/metrics")
		if err != nil {
			return false, nil
		}
		s, err := parseSyncs(page)
		if err != nil {
			return false, nil
		}
		if s.nodes-s.nodesFailed-s.nodesWaited < float64(r.sel) {
			return false, nil
		}
		families, err := parseMetrics(page)
		if err != nil {
			return false, nil
		}
		depth := families["nodeconfig_reconciler_queue_depth"].GetMetric()
		return len(depth) == 1 && depth[0].GetGauge().GetValue() == 0, nil
	})
	if err != nil {
		return fmt.Errorf("the new leader syncing every node: %w", err)
	}
	return nil
}

// waitStandbyTokens waits until the standby has minted, standing by, a
// token for every node's agent, as a standby that has stood by a while
// has: the fail-over measured is one from a steady state.
func (r *fleetRun) waitStandbyTokens(timeout time.Duration) error {
	start := time.Now()
	var s syncCounts
	err := wait.PollUntilContextTimeout(r.ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		var err error
		if s, err = readSyncs(r.standbyMetrics); err != nil {
			return false, nil
		}
		return s.tokensStandby >= float64(r.n), nil
	})
	if err != nil {
		return fmt.Errorf("the standby minting every node's token (%.0f of %d): %w", s.tokensStandby, r.n, err)
	}
	fmt.Printf("  the standby minted every node's token in %v\n", since(start).Round(time.Millisecond))
	return nil
}

// waitLeading waits until the reconciler serving metrics on metricsAddr
// says it leads.
func waitLeading(ctx context.Context, metricsAddr string, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		page, err := fetch("http://" + metricsAddr + "/metrics")
		if err != nil {
			return false, nil
		}
		families, err := parseMetrics(page)
		if err != nil {
			return false, nil
		}
		m := families["nodeconfig_reconciler_leader"].GetMetric()
		return len(m) == 1 && m[0].GetGauge().GetValue() == 1, nil
	})
}
