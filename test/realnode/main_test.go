package realnode_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nodeconfig.io/test/proc"
	"nodeconfig.io/test/realnode"
)

// node is the real one-node cluster all tests of this package share.
var node *realnode.Node

// TestMain starts the node with the install's images loaded, runs the tests,
// stops it, and fails the run if anything of it is left on the host.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	bin, err := proc.BinDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var images []string
	for _, s := range []string{"checkpointd", "statusd", "reconciler"} {
		images = append(images, filepath.Join(bin, "images", s+".tar"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	node, err = realnode.Start(ctx, images...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cannot start the real node: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "real node %s ready in %s\n", realnode.NodeName, time.Since(start).Round(time.Millisecond))
	code := m.Run()
	keep := ""
	if code != 0 {
		keep, _ = os.MkdirTemp("", "nodeconfig-realnode-logs-")
		for _, p := range []*proc.Process{node.Kubelet.Process, node.Containerd} {
			fmt.Fprintf(os.Stderr, "--- last lines of %s\n%s\n", p.Name, p.Tail(3000))
		}
	}
	if err := node.Stop(keep); err != nil {
		fmt.Fprintf(os.Stderr, "stopping the real node: %v\n", err)
		code = 1
	}
	if left := node.Leftovers(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "the real node left changes on the host:\n  %s\n", strings.Join(left, "\n  "))
		code = 1
	}
	if keep != "" {
		fmt.Fprintf(os.Stderr, "logs kept in %s\n", keep)
	}
	return code
}
