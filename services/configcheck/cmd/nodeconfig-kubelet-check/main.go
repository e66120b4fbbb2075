// Command nodeconfig-kubelet-check judges one kubelet drop-in, read on
// stdin, as the kubelet would over its defaults (kubeletcheck.Check). The
// reconciler runs it as a child process for each new version of a
// NodeConfig whose validator is kubelet (kubeletexec), so that only this
// short-lived process carries the kubelet's code.
//
// Exit 0: valid. Exit 1: invalid, with the kubelet's words on stdout.
// Exit 2: it could not judge (no input, arguments); so does any crash.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"nodeconfig.io/services/configcheck/kubeletcheck"
	"nodeconfig.io/services/configcheck/kubeletexec"
)

// maxInput is above what a ConfigMap can hold (1 MiB); more is not a
// drop-in.
const maxInput = 4 << 20

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintf(stderr, "usage: %s < drop-in\n  exit %d: valid; %d: invalid, the reason on stdout; %d: could not judge\n",
			kubeletexec.Binary, kubeletexec.ExitValid, kubeletexec.ExitInvalid, kubeletexec.ExitCannotJudge)
		return kubeletexec.ExitCannotJudge
	}
	data, err := io.ReadAll(io.LimitReader(stdin, maxInput+1))
	if err != nil {
		fmt.Fprintf(stderr, "read the drop-in: %v\n", err)
		return kubeletexec.ExitCannotJudge
	}
	if len(data) > maxInput {
		fmt.Fprintf(stderr, "the drop-in is larger than %d bytes\n", maxInput)
		return kubeletexec.ExitCannotJudge
	}
	if err := kubeletcheck.Check(context.Background(), data); err != nil {
		fmt.Fprintln(stdout, err)
		return kubeletexec.ExitInvalid
	}
	return kubeletexec.ExitValid
}
