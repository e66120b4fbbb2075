package consumer

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/coreos/go-systemd/v22/dbus"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/servekit/atomicfile"
)

// Between is a restarter that can act while no consumer runs: after the
// running one is gone and before the next starts. A kubelet's state files
// that its new config refuses (docs/disruption.md) are removed there: the
// old kubelet may still write them while it runs.
type Between interface {
	RestartBetween(ctx context.Context, between func() error) error
}

// RestartBetween stops the running consumer and runs between once it is
// gone; its babysitter starts the next one after its restart delay
// (systemd's RestartSec, 10 s in kubeadm's unit), which between, a few
// file removals, is far within.
func (s Signal) RestartBetween(ctx context.Context, between func() error) error {
	if err := s.Restart(ctx); err != nil {
		return err
	}
	return between()
}

// RestartBetween stops the unit, runs between, and starts it again.
func (s Systemd) RestartBetween(ctx context.Context, between func() error) error {
	conn, err := s.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := job(ctx, s.Unit, "stop", func(done chan<- string) (int, error) { return conn.StopUnitContext(ctx, s.Unit, "replace", done) }); err != nil {
		return err
	}
	if err := between(); err != nil {
		// The consumer is started again on what is there: a stopped one
		// helps nothing, and the next restart tries again.
		_ = job(ctx, s.Unit, "start", func(done chan<- string) (int, error) { return conn.StartUnitContext(ctx, s.Unit, "replace", done) })
		return err
	}
	return job(ctx, s.Unit, "start", func(done chan<- string) (int, error) { return conn.StartUnitContext(ctx, s.Unit, "replace", done) })
}

// RestartBetween runs between: nothing is restarted.
func (None) RestartBetween(_ context.Context, between func() error) error { return between() }

// job runs one systemd job on unit and waits for its result.
func job(ctx context.Context, unit, what string, start func(done chan<- string) (int, error)) error {
	done := make(chan string, 1)
	if _, err := start(done); err != nil {
		return fmt.Errorf("%s unit %s: %w", what, unit, err)
	}
	select {
	case result := <-done:
		if result != "done" {
			return fmt.Errorf("%s unit %s: job %s", what, unit, result)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s unit %s: %w", what, unit, ctx.Err())
	}
}

func (s Systemd) connect(ctx context.Context) (*dbus.Conn, error) {
	connect := s.Connect
	if connect == nil {
		connect = dbus.NewSystemConnectionContext
	}
	conn, err := connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect to the system bus: %w", err)
	}
	return conn, nil
}

// removeStateFiles is the step between a kubelet's stop and its start that
// removes names from its root directory, durably, and records that they
// are gone, so that a restart after it leaves the new kubelet's alone.
//
// A file it cannot remove (no root directory known, a read-only mount)
// holds nothing up: the kubelet is started anyway, refuses to run on the
// new config, and the gate rolls it back to the config the file was
// written under, which runs; the error is logged, and the kubelet's own
// exit line, which names the file, goes into the rollback's message.
func (g *Gate) removeStateFiles(active *nodeconfigv1.ConfigSource, names []string) func() error {
	return func() error {
		if err := g.removeStateFilesNow(names); err != nil {
			g.Log.Error("cannot remove the kubelet's state files its new config refuses; restarting it anyway", "err", err, "files", names, "active", records.Describe(active))
			return nil
		}
		if _, err := g.Lifecycle.StateFilesRemoved(active); err != nil {
			g.Log.Error("consumer gate: write records", "err", err)
		}
		g.Log.Info("removed the kubelet's state files while it was down", "dir", g.KubeletRootDir, "files", names, "active", records.Describe(active))
		return nil
	}
}

func (g *Gate) removeStateFilesNow(names []string) error {
	if g.KubeletRootDir == "" {
		return fmt.Errorf("no kubelet root directory is known (--kubelet-root-dir)")
	}
	for _, name := range names {
		if !filepath.IsLocal(name) {
			return fmt.Errorf("state file %q is not a path inside the kubelet's root directory", name)
		}
		if err := atomicfile.Remove(filepath.Join(g.KubeletRootDir, name)); err != nil {
			return err
		}
	}
	return nil
}
