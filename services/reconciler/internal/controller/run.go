package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// Run waits for the caches and runs workers until ctx ends; then no
// gauge of this leadership is left (forgetLeadership).
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer c.metrics.forgetLeadership() // last: once every worker has stopped
	defer c.nodeQ.ShutDown()
	defer c.ncQ.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), c.o.Synced...) {
		return fmt.Errorf("caches did not sync")
	}
	// Every node once at start: the new leader rebuilds its view.
	nodes, err := c.o.Nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, n := range nodes {
		c.nodeQ.Add(n.Name)
	}
	c.o.Log.Info("reconciler started", "nodes", len(nodes), "workers", workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for c.processNext(ctx, NodeQueue, c.nodeQ, c.syncNode) {
				}
			}, time.Second)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		wait.UntilWithContext(ctx, func(ctx context.Context) {
			for c.processNext(ctx, NodeConfigQueue, c.ncQ, c.syncNodeConfig) {
			}
		}, time.Second)
	}()
	wg.Go(func() { c.reportGauges(ctx) })
	<-ctx.Done()
	c.nodeQ.ShutDown()
	c.ncQ.ShutDown()
	wg.Wait()
	return nil
}

// errWaits ends a sync that waits for an event which brings its key back
// (a node's ConfigMap's first listing): the sync did not complete, so it
// neither fails nor succeeds, and the key's backoff stays as it was.
var errWaits = errors.New("the sync waits for an event")

// processNext runs one key of q through sync. A sync's delay brings the
// key back after it; a failure without one is retried by q's rate limiter;
// a sync that waits (errWaits) leaves the key to the event it waits for.
// It returns false once q is shut down.
func (c *Controller) processNext(ctx context.Context, name string, q workqueue.TypedRateLimitingInterface[string], sync func(context.Context, string) (time.Duration, error)) bool {
	key, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(key)
	start := time.Now()
	after, err := sync(ctx, key)
	c.metrics.syncSeconds.WithLabelValues(name).Observe(time.Since(start).Seconds())
	if errors.Is(err, errWaits) {
		c.metrics.syncs.WithLabelValues(name, "waiting").Inc()
		return true
	}
	if err != nil {
		c.metrics.syncs.WithLabelValues(name, "error").Inc()
		if after > 0 {
			// The sync already took its delay from the rate limiter.
			q.AddAfter(key, after)
		} else {
			q.AddRateLimited(key)
		}
		return true
	}
	c.metrics.syncs.WithLabelValues(name, "ok").Inc()
	q.Forget(key)
	if after > 0 {
		q.AddAfter(key, after)
	}
	return true
}

// reportGauges refreshes the queue depth and nodes-by-state gauges every
// few seconds until ctx ends.
func (c *Controller) reportGauges(ctx context.Context) {
	wait.UntilWithContext(ctx, func(context.Context) {
		c.metrics.queueDepth.WithLabelValues().Set(float64(c.nodeQ.Len()))
		c.mu.Lock()
		counts := map[nodeconfigv1.LifecycleState]int{}
		for _, n := range c.nodes {
			counts[n.State]++
		}
		c.mu.Unlock()
		for st, name := range nodeconfigv1.LifecycleState_name {
			c.metrics.nodesByState.WithLabelValues(name).Set(float64(counts[nodeconfigv1.LifecycleState(st)]))
		}
	}, 5*time.Second)
}
