package realnode_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"nodeconfig.io/test/framework/hostsnapshot"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/realnode"
	"nodeconfig.io/test/realnode/hoststate"
)

// node is the real one-node cluster all tests of this package share.
var node *realnode.Node

// TestMain starts the node with the install's images loaded, runs the tests,
// stops it, and fails the run if anything of it is left on the host: as the
// cleanup's own record says (hoststate), and as snapshots of the host taken
// before and after say (hostsnapshot), which share nothing with it.
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
	persons, err := personsBin(bin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(persons)
	// The run's processes: this test's descendants, and whatever names the
	// node's root or the binaries' directories in its executable or
	// arguments (containerd's shims, reparented to init). The containers
	// are found by their cgroups, which the run creates.
	scope := hostsnapshot.Scope{Marks: []string{realnode.Root, bin + "/", persons}, Roots: []int{os.Getpid()}}
	snapStart := time.Now()
	snap, err := hostsnapshot.Take(scope)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "host snapshot taken in %s\n", time.Since(snapStart).Round(time.Millisecond))
	flag.Parse()
	if !testing.Short() {
		if code := checkPersonsCommand(ctx, before, snap, scope, persons); code != 0 {
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
	after, err := hostsnapshot.Take(scope)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	left := snap.Diff(after)
	left = append(left, node.Leftovers()...)
	left = append(left, before.Leftovers()...)
	if len(left) > 0 {
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
// behind, which the next start must undo (checked against the snapshot
// taken before, after the tests). The host is judged both by the cleanup's
// own record (before) and by snapshots this test takes itself (snap).
func checkPersonsCommand(ctx context.Context, before *hoststate.Before, snap *hostsnapshot.Snapshot, scope hostsnapshot.Scope, bin string) int {
	start := time.Now()
	if err := runPersonsCommand(ctx, syscall.SIGINT, bin); err != nil {
		fmt.Fprintf(os.Stderr, "make cluster, then Ctrl-C: %v\n", err)
		return 1
	}
	after, err := hostsnapshot.Take(scope)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if left := append(snap.Diff(after), before.Leftovers()...); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "make cluster, then Ctrl-C, left changes on the host:\n  %s\n", strings.Join(left, "\n  "))
		return 1
	}
	fmt.Fprintf(os.Stderr, "make cluster stopped with Ctrl-C left nothing on the host (%s)\n", time.Since(start).Round(time.Millisecond))
	// Killed, it leaves pods, mounts and the rest behind: the next start
	// must undo them (checked with the snapshot, after the tests).
	start = time.Now()
	if err := runPersonsCommand(ctx, syscall.SIGKILL, bin); err != nil {
		fmt.Fprintf(os.Stderr, "make cluster, then SIGKILL: %v\n", err)
		return 1
	}
	if after, err = hostsnapshot.Take(scope); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if len(snap.Diff(after)) == 0 {
		fmt.Fprintln(os.Stderr, "make cluster killed with SIGKILL left nothing behind: the start after it proves nothing")
		return 1
	}
	fmt.Fprintf(os.Stderr, "make cluster killed with SIGKILL left %d changes for the next start to undo (%s)\n", len(snap.Diff(after)), time.Since(start).Round(time.Millisecond))
	return 0
}

// personsBin is the BIN of the test's 'make cluster': a directory of its own
// where make builds realcluster, with every other binary of ./bin linked in
// (PATH has BIN first, as a person's make cluster has ./bin).
func personsBin(shared string) (string, error) {
	dir, err := os.MkdirTemp("", "nodeconfig-make-cluster-")
	if err != nil {
		return "", err
	}
	entries, err := os.ReadDir(shared)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if e.Name() == "realcluster" {
			continue
		}
		if err := os.Symlink(filepath.Join(shared, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// runPersonsCommand runs 'make cluster' as typed at a terminal, in its own
// process group, until realcluster says it is ready, then sends sig to the
// group, as a terminal's Ctrl-C does, and waits for make to end: after
// SIGINT, realcluster must clean up and exit 0, and make with it (or by
// the SIGINT it got itself, which GNU make re-raises once its child is
// done).
//
// make builds realcluster into bin; -o keeps it from building what the
// package's tests run from ./bin (the services, the images, the control
// plane and the node's binaries): the test is of the command's Ctrl-C, and
// a fresh checkout's go.mod is newer than any binary built from it.
func runPersonsCommand(ctx context.Context, sig syscall.Signal, bin string) error {
	root, err := proc.RepoRoot()
	if err != nil {
		return err
	}
	cmd := proc.MakeAsTyped(ctx, root, "cluster", "BIN="+bin, "-o", "build", "-o", "images", "-o", "testbin", "-o", "nodebin")
	// A deadline kills the whole group, not make alone.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var mu sync.Mutex
	var out bytes.Buffer
	output := func() string {
		mu.Lock()
		defer mu.Unlock()
		return out.String()
	}
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		return err
	}
	group := cmd.Process.Pid
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(r)
		said := false
		for sc.Scan() {
			mu.Lock()
			out.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if strings.HasPrefix(sc.Text(), "ready:") && !said {
				said = true
				ready <- true
			}
		}
		close(ready)
	}()
	exited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		w.Close()
		exited <- err
	}()
	select {
	case ok := <-ready:
		if !ok {
			<-exited
			return fmt.Errorf("exited before it was ready:\n%s", output())
		}
	case <-time.After(5 * time.Minute):
		_ = syscall.Kill(-group, syscall.SIGKILL)
		<-exited
		return fmt.Errorf("not ready within 5 minutes:\n%s", output())
	}
	if err := syscall.Kill(-group, sig); err != nil {
		return err
	}
	select {
	case err = <-exited:
	case <-time.After(3 * time.Minute):
		_ = syscall.Kill(-group, syscall.SIGKILL)
		<-exited
		return fmt.Errorf("still running 3 minutes after %v:\n%s", sig, output())
	}
	if sig != syscall.SIGINT {
		return nil
	}
	var exitErr *exec.ExitError
	if err != nil {
		if !errors.As(err, &exitErr) {
			return err
		}
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGINT {
			return fmt.Errorf("exit after Ctrl-C: %v\n%s", err, output())
		}
	}
	for _, line := range strings.Split(output(), "\n") {
		if strings.HasPrefix(line, "make: ***") || strings.HasPrefix(line, "error:") || strings.HasPrefix(line, "left on the host:") {
			return fmt.Errorf("after Ctrl-C it printed %q:\n%s", line, output())
		}
	}
	return nil
}
