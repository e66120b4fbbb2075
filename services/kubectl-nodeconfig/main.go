// Command kubectl-nodeconfig is the kubectl plugin of nodeconfig:
// `kubectl nodeconfig status|why|diff|pause|resume`. Install it on your PATH
// with `go install ./services/kubectl-nodeconfig` from a checkout.
package main

import (
	"os"

	"nodeconfig.io/services/kubectl-nodeconfig/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr)) }
