package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/util/wait"
)

// startFirstProfiling, with -profile-first, profiles the first rollout:
// CPU profiles of the reconciler and the API server over its first
// -profile-first-for, and the reconciler's goroutines every two seconds of
// them, which show where its workers wait (a rate limiter, a TokenRequest,
// an agent's call). The returned stop waits for them and saves the
// reconciler's metrics (its client's request and rate-limiter latencies
// among them).
func (r *fleetRun) startFirstProfiling() (stop func() error, err error) {
	return r.profileLeader("first", "first rollout", r.metricsAddr)
}

// profileLeader profiles, with -profile-first, the reconciler serving its
// metrics on metricsAddr as startFirstProfiling says, into files named
// after prefix.
func (r *fleetRun) profileLeader(prefix, what, metricsAddr string) (stop func() error, err error) {
	dir := r.o.profileFirst
	if dir == "" {
		return func() error { return nil }, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	base := "http://" + metricsAddr
	// The reconciler has just started: its endpoint answers a moment later.
	if err := wait.PollUntilContextTimeout(r.ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, err := fetch(base + "/metrics")
		return err == nil, nil
	}); err != nil {
		return nil, fmt.Errorf("the reconciler's metrics endpoint: %w", err)
	}
	ctx, cancel := context.WithCancel(r.ctx)
	seconds := strconv.Itoa(int(r.o.profileFirstFor.Seconds()))
	var g errgroup.Group
	save := func(name string, get func() ([]byte, error)) error {
		b, err := get()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return os.WriteFile(filepath.Join(dir, name), b, 0o644)
	}
	g.Go(func() error {
		return save(prefix+"-reconciler.cpu.pprof", func() ([]byte, error) { return fetch(base + "/debug/pprof/profile?seconds=" + seconds) })
	})
	g.Go(func() error {
		return save(prefix+"-apiserver.cpu.pprof", func() ([]byte, error) {
			return r.admin.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", seconds).DoRaw(ctx)
		})
	})
	g.Go(func() error {
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		end := time.After(r.o.profileFirstFor)
		for i := 1; ; i++ {
			select {
			case <-ctx.Done():
				return nil
			case <-end:
				return nil
			case <-tick.C:
			}
			name := fmt.Sprintf("%s-reconciler.goroutines.%02d.txt", prefix, i*2)
			if err := save(name, func() ([]byte, error) { return fetch(base + "/debug/pprof/goroutine?debug=1") }); err != nil {
				return err
			}
		}
	})
	return func() error {
		err := g.Wait()
		cancel()
		if serr := save(prefix+"-reconciler.metrics.txt", func() ([]byte, error) { return fetch(base + "/metrics") }); serr != nil && err == nil {
			err = serr
		}
		fmt.Printf("    %s's profiles in %s\n", what, dir)
		return err
	}, nil
}
