package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ceilingAnnotation is the probe's: statusd and the reconciler read no
// annotation but their own, so it is left on the Nodes.
const ceilingAnnotation = "nodeconfig.io/fleet-ceiling-probe"

// The probe's shape: writers enough to keep the API server busy, over
// connections of their own, as many statusds write over theirs.
const (
	ceilingWriters = 64
	ceilingConns   = 8
	ceilingWarmup  = time.Second
)

// writeCeiling measures how many Node writes a second this API server
// takes: ceilingWriters goroutines (at most one a Node) patch one annotation of the fleet's
// Nodes round robin, as statusd writes its status (a merge patch of the
// Node's status subresource, each one a new value), without a client-side
// rate limit, for a warm-up and then window, in which completed writes are
// counted. Its user agent is not nodeconfig's: the write counts never see
// it, and it runs before they start.
// all is every write it made, the warm-up's too.
func writeCeiling(ctx context.Context, base *rest.Config, n int, window time.Duration) (perSecond float64, all int64, err error) {
	clients := make([]kubernetes.Interface, ceilingConns)
	for i := range clients {
		cfg := rest.CopyConfig(base)
		cfg.QPS, cfg.Burst = -1, 0 // no client-side rate limit
		cfg.UserAgent = "fleet-ceiling-probe"
		cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil } // a transport of its own
		if clients[i], err = kubernetes.NewForConfig(cfg); err != nil {
			return 0, 0, err
		}
	}
	var next, counted atomic.Int64
	start := time.Now()
	from, to := start.Add(ceilingWarmup), start.Add(ceilingWarmup+window)
	var g errgroup.Group
	// Fewer writers than Nodes: two on one Node would wait for each other.
	for w := range min(ceilingWriters, n) {
		client := clients[w%len(clients)]
		g.Go(func() error {
			for time.Now().Before(to) {
				i := next.Add(1)
				patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, ceilingAnnotation, strconv.FormatInt(i, 10))
				if _, err := client.CoreV1().Nodes().Patch(ctx, nodeName(int(i)%n), types.MergePatchType, []byte(patch),
					metav1.PatchOptions{}, "status"); err != nil {
					return fmt.Errorf("ceiling probe: %w", err)
				}
				if now := time.Now(); now.After(from) && now.Before(to) {
					counted.Add(1)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, 0, err
	}
	return float64(counted.Load()) / window.Seconds(), next.Load(), nil
}
