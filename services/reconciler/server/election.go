package server

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// LeaderElection names the Lease the replicas contend for and its timing.
type LeaderElection struct {
	Namespace, Name string
	// LeaseDuration is how long a lost leader's lease blocks the others.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader keeps trying to renew before
	// giving up.
	RenewDeadline time.Duration
	// RetryPeriod is how often candidates try to acquire the lease.
	RetryPeriod time.Duration
	// Identity is this replica's name in the Lease (empty: hostname_pid).
	Identity string
}

// electionConfig builds the election that runs lead while this replica
// holds the Lease.
func (r *Reconciler) electionConfig(le LeaderElection) (*leaderelection.LeaderElectionConfig, error) {
	if le.Identity == "" {
		host, _ := os.Hostname()
		le.Identity = fmt.Sprintf("%s_%d", host, os.Getpid())
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, le.Namespace, le.Name,
		r.o.Kube.CoreV1(), r.o.Kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: le.Identity})
	if err != nil {
		return nil, err
	}
	log := r.o.Log
	return &leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: le.LeaseDuration, RenewDeadline: le.RenewDeadline, RetryPeriod: le.RetryPeriod,
		ReleaseOnCancel: true, Name: le.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			// lead's context ends when the lease is lost, and lead builds
			// its whole view anew each time, so a replica that lost the
			// lease (an API server outage, say) simply stands again.
			OnStartedLeading: func(ctx context.Context) {
				r.stopStandingBy()
				r.lead(ctx)
			},
			OnStoppedLeading: func() { log.Info("not leading; standing for election again") },
			OnNewLeader:      func(id string) { log.Info("leader", "identity", id) },
		},
	}, nil
}

// runElected stands for election until ctx ends, again after every lost
// lease, standing by (standBy) until it leads. It returns the error of an
// election config client-go refuses.
func (r *Reconciler) runElected(ctx context.Context) error {
	for ctx.Err() == nil {
		elector, err := leaderelection.NewLeaderElector(*r.election)
		if err != nil {
			return err
		}
		standingCtx, stopStanding := context.WithCancel(ctx)
		var standing sync.WaitGroup
		standing.Go(func() { r.standBy(standingCtx, elector) })
		// Set before the elector runs, which calls it as it starts leading;
		// the standby's last request may end after the lead begins.
		r.stopStandingBy = stopStanding
		elector.Run(ctx)
		stopStanding()
		standing.Wait()
	}
	return nil
}
