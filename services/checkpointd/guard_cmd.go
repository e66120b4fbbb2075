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

// guardMain runs `checkpointd guard [--dir DIR]`, the host-side start guard
// of the kubelet (internal/guard), and exits 0 whatever happens: it never
// returns, and never starts the service.
func guardMain(args []string) {
	time.AfterFunc(guardDeadline, func() {
		fmt.Fprintf(os.Stderr, "nodeconfig-guard: still running after %s, exiting so that the kubelet starts\n", guardDeadline)
		os.Exit(0)
	})
	guard.Main(args, os.Stderr)
	os.Exit(0)
}
