package cluster

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"nodeconfig.io/test/framework/proc"
)

// Shared is the cluster of the current test package, set by Main.
var Shared *Cluster

// Main starts one cluster for a whole test package, runs the tests, and
// stops it. Logs stay on disk and are printed only when a test failed.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "nodeconfig-cluster-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := Start(ctx, Options{Dir: dir, AuditLog: true})
	if err != nil {
		fmt.Fprintf(os.Stderr, "cannot start the test control plane: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "test control plane ready in %s at %s (state in %s)\n", time.Since(start).Round(time.Millisecond), c.URL, dir)
	Shared = c
	code := m.Run()
	c.Stop()
	if code != 0 {
		for _, p := range []*proc.Process{c.APIServer, c.Etcd} {
			fmt.Fprintf(os.Stderr, "--- last lines of %s\n%s\n", p.LogPath, p.Tail(4000))
		}
		fmt.Fprintf(os.Stderr, "state kept in %s\n", dir)
		return code
	}
	_ = os.RemoveAll(dir)
	return code
}
