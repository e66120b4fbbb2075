// Command nodeconfig-guard is the kubelet's host-side start guard
// (internal/guard): systemd runs it before every kubelet start, with no
// pod and no agent, so it is a binary of its own, a fraction of the
// agent's size.
package main

import (
	"fmt"
	"os"
	"time"

	"nodeconfig.io/services/checkpointd/internal/guard"
)

// guardDeadline bounds a guard run: systemd fails a kubelet start whose
// ExecStartPre= outlives TimeoutStartSec= whatever its '-', so a guard stuck
// on a sick disk exits and lets the kubelet start instead.
const guardDeadline = 10 * time.Second

// main runs `nodeconfig-guard [--dir DIR]` and exits 0 whatever happens.
func main() {
	time.AfterFunc(guardDeadline, func() {
		fmt.Fprintf(os.Stderr, "nodeconfig-guard: still running after %s, exiting so that the kubelet starts\n", guardDeadline)
		os.Exit(0)
	})
	guard.Main(os.Args[1:], os.Stderr)
	os.Exit(0)
}
