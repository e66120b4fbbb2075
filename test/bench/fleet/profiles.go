package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
)

// startProfiling, with -profile, starts the CPU profiles of the change:
// the reconciler's, the API server's, this process's, and each agent
// host's, until stopProfiling.
func (r *fleetRun) startProfiling() error {
	if r.o.profiles == "" {
		return nil
	}
	self := "agents.cpu.pprof"
	if r.hosts != nil {
		self = "harness.cpu.pprof" // the agents run in their hosts
	}
	stop, err := startProfiles(r.ctx, r.o.profiles, self, r.metricsAddr, r.admin)
	if err != nil {
		return err
	}
	r.stopProfile = stop
	if r.hosts == nil {
		return nil
	}
	if err := r.hosts.command(func(h *agentHost) string {
		return "profile " + filepath.Join(r.o.profiles, h.name()+".cpu.pprof")
	}); err != nil {
		return err
	}
	r.stopProfile = func() error {
		err := r.hosts.command(func(*agentHost) string { return "stop-profile" })
		return errors.Join(stop(), err)
	}
	return nil
}

// stopProfiling ends the profiles startProfiling started and says where
// they are.
func (r *fleetRun) stopProfiling() error {
	if r.stopProfile == nil {
		return nil
	}
	if err := r.stopProfile(); err != nil {
		return err
	}
	fmt.Printf("  profiles in %s\n", r.o.profiles)
	return nil
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
