package realnode_test

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/realnode"
	"nodeconfig.io/test/realnode/hoststate"
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	before, err := realnode.ObserveHost()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	flag.Parse()
	if !testing.Short() {
		if code := checkPersonsCommand(ctx, before); code != 0 {
			return code
		}
	}
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
	if left := append(node.Leftovers(), before.Leftovers()...); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "the real node left changes on the host:\n  %s\n", strings.Join(left, "\n  "))
		code = 1
	}
	if keep != "" {
		fmt.Fprintf(os.Stderr, "logs kept in %s\n", keep)
	}
	return code
}

// checkPersonsCommand runs 'make cluster' twice: stopped with Ctrl-C it
// leaves nothing on the host; killed, it leaves pods, mounts and the rest
// behind, which the next start must undo (checked against before after the
// tests).
func checkPersonsCommand(ctx context.Context, before *hoststate.Before) int {
	if err := runPersonsCommand(ctx, syscall.SIGINT); err != nil {
		fmt.Fprintf(os.Stderr, "make cluster, then Ctrl-C: %v\n", err)
		return 1
	}
	if left := before.Leftovers(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "make cluster, then Ctrl-C, left changes on the host:\n  %s\n", strings.Join(left, "\n  "))
		return 1
	}
	fmt.Fprintln(os.Stderr, "make cluster stopped with Ctrl-C left nothing on the host")
	// Killed, it leaves pods, mounts and the rest behind: the next start
	// must undo them (checked with before, after the tests).
	if err := runPersonsCommand(ctx, syscall.SIGKILL); err != nil {
		fmt.Fprintf(os.Stderr, "make cluster, then SIGKILL: %v\n", err)
		return 1
	}
	if left := before.Leftovers(); len(left) == 0 {
		fmt.Fprintln(os.Stderr, "make cluster killed with SIGKILL left nothing behind: the start after it proves nothing")
		return 1
	}
	return 0
}

// runPersonsCommand runs 'make cluster' (test/cmd/realcluster) until it says
// it is ready, then sends it sig and waits for it to end: after SIGINT it
// must exit 0 by itself.
func runPersonsCommand(ctx context.Context, sig syscall.Signal) error {
	dir, err := os.MkdirTemp("", "realcluster-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "realcluster")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "nodeconfig.io/test/cmd/realcluster").CombinedOutput(); err != nil {
		return fmt.Errorf("build: %v: %s", err, out)
	}
	cmd := exec.CommandContext(ctx, bin)
	var out bytes.Buffer
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, &out
	if err := cmd.Start(); err != nil {
		return err
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(r)
		said := false
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			if strings.HasPrefix(sc.Text(), "ready:") && !said {
				said = true
				ready <- true
			}
		}
		close(ready)
	}()
	select {
	case ok := <-ready:
		if !ok {
			_ = cmd.Wait()
			return fmt.Errorf("exited before it was ready:\n%s", out.String())
		}
	case <-time.After(5 * time.Minute):
		_ = cmd.Process.Kill()
		return fmt.Errorf("not ready within 5 minutes:\n%s", out.String())
	}
	if err := cmd.Process.Signal(sig); err != nil {
		return err
	}
	err = cmd.Wait()
	w.Close()
	if sig == syscall.SIGINT && err != nil {
		return fmt.Errorf("exit after Ctrl-C: %v\n%s", err, out.String())
	}
	return nil
}
