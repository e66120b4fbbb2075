package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"nodeconfig.io/test/framework/pki"
)

// A fleet larger than one process's open-file limit allows is hosted by
// child processes of this command, each serving the agents of a range of
// nodes: the same agents as in-process, one process per range instead of
// one per node. The coordinator (this process's parent mode) keeps the
// cluster, the watch and the reconciler; node names and agent addresses
// follow from the index, so it needs nothing back from a host but "ready".

// agentHostFlag, first on the command line, runs this command as an agent
// host: a child of a coordinator, never started by hand (absent from -help).
const agentHostFlag = "-agent-host"

// filesPerNode is the most one node's agents hold open with
// authentication: the bbolt store, the listener, its statusd's connection
// to the API server, and the reconciler's connection while it has one.
// A bound: the reconciler's connections come and go, so most nodes hold
// fewer.
const filesPerNode = 4

// agentHost is one child process and the nodes it hosts.
type agentHost struct {
	from, to int
	log      string
	cmd      *exec.Cmd
	stdin    *os.File // the write end: closing it stops the host
	done     chan struct{}
	err      error // how it exited, once done is closed
}

// agentHosts are the children hosting a fleet's agents.
type agentHosts struct {
	hosts    []*agentHost
	stopping atomic.Bool
}

// startAgentHosts splits nodes 0 to n-1 into ranges of at most perHost and
// starts a child for each, then waits until every child's agents serve. A
// child that exits before stop cancels ctx with the reason.
func startAgentHosts(ctx context.Context, cancel context.CancelCauseFunc, kubeconfig, root string, n, perHost int, fsync bool, sec *security, chosen selection, idleWithoutStatusd bool, timeout time.Duration) (*agentHosts, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	k := (n + perHost - 1) / perHost
	hs := &agentHosts{}
	ready := make(chan error, k)
	for j := range k {
		h := &agentHost{from: j * n / k, to: (j + 1) * n / k, done: make(chan struct{})}
		h.log = filepath.Join(root, h.name()+".log")
		args := []string{agentHostFlag, "-from", strconv.Itoa(h.from), "-to", strconv.Itoa(h.to), "-root", root,
			"-kubeconfig", kubeconfig, "-fsync=" + strconv.FormatBool(fsync), "-auth=" + strconv.FormatBool(sec != nil),
			"-nodes", strconv.Itoa(chosen.n), "-select", strconv.Itoa(chosen.sel), "-idle-without-statusd=" + strconv.FormatBool(idleWithoutStatusd)}
		if sec != nil {
			args = append(args, "-tls-cert", sec.tls.CertFile, "-tls-key", sec.tls.KeyFile, "-reconciler-user", sec.user)
		}
		if err := h.start(exe, args, ready); err != nil {
			hs.stop()
			return nil, err
		}
		hs.hosts = append(hs.hosts, h)
	}
	deadline := time.After(timeout)
	for range k {
		select {
		case err = <-ready:
		case <-ctx.Done():
			err = context.Cause(ctx)
		case <-deadline:
			err = fmt.Errorf("the agent hosts did not all serve within %v (logs in %s)", timeout, root)
		}
		if err != nil {
			hs.stop()
			return nil, err
		}
	}
	for _, h := range hs.hosts {
		go func() {
			<-h.done
			if !hs.stopping.Load() {
				cancel(fmt.Errorf("the agent host of nodes %d to %d exited (%v); its log, %s, ends:\n%s", h.from, h.to-1, h.err, h.log, tail(h.log, 2000)))
			}
		}()
	}
	return hs, nil
}

// start starts the child; ready gets nil once it serves, or why it never will.
func (h *agentHost) start(exe string, args []string, ready chan<- error) error {
	logf, err := os.Create(h.log)
	if err != nil {
		return err
	}
	defer logf.Close()
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer stdinR.Close()
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		stdinW.Close()
		return err
	}
	defer stdoutW.Close()
	cmd := exec.Command(exe, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdinR, stdoutW, logf
	// SIGKILL when the coordinator dies, however; its own process group,
	// so a ^C reaches the coordinator alone, which stops the hosts.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	h.cmd, h.stdin = cmd, stdinW
	started := make(chan error, 1)
	go func() {
		// The kernel sends Pdeathsig when the thread that forked the
		// child ends, which in Go can be before the process does: this
		// goroutine keeps its thread until the child has exited.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			close(h.done)
			return
		}
		started <- nil
		h.err = cmd.Wait()
		close(h.done)
	}()
	if err := <-started; err != nil {
		stdinW.Close()
		stdoutR.Close()
		return fmt.Errorf("start an agent host: %w", err)
	}
	go func() {
		defer stdoutR.Close()
		sc := bufio.NewScanner(stdoutR)
		said := false
		for sc.Scan() {
			if !said && strings.HasPrefix(sc.Text(), "ready") {
				said = true
				ready <- nil
			}
		}
		if !said {
			<-h.done
			ready <- fmt.Errorf("the agent host of nodes %d to %d exited before serving (%v); its log, %s, ends:\n%s", h.from, h.to-1, h.err, h.log, tail(h.log, 2000))
		}
	}()
	return nil
}

// stop closes every host's stdin, which stops it cleanly, and kills those
// still running after a grace period.
func (hs *agentHosts) stop() {
	hs.stopping.Store(true)
	for _, h := range hs.hosts {
		_ = h.stdin.Close()
	}
	var wg sync.WaitGroup
	for _, h := range hs.hosts {
		wg.Go(func() {
			select {
			case <-h.done:
			case <-time.After(30 * time.Second):
				_ = h.cmd.Process.Kill()
				<-h.done
			}
		})
	}
	wg.Wait()
}

// pids are the hosts' process ids.
func (hs *agentHosts) pids() []int {
	var out []int
	for _, h := range hs.hosts {
		out = append(out, h.cmd.Process.Pid)
	}
	return out
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// followCommands runs the coordinator's commands, one a line, until its
// input ends: "profile FILE" starts this host's CPU profile into FILE,
// "stop-profile" ends it.
func followCommands(in io.Reader) {
	stop := func() {}
	defer func() { stop() }()
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		command, arg, _ := strings.Cut(sc.Text(), " ")
		switch command {
		case "profile":
			stop()
			var err error
			if stop, err = startCPUProfile(arg); err != nil {
				fmt.Fprintln(os.Stderr, "profile:", err)
				stop = func() {}
			}
		case "stop-profile":
			stop()
			stop = func() {}
		}
	}
}

// name names the host's files by its range of nodes.
func (h *agentHost) name() string { return fmt.Sprintf("agents-%05d-%05d", h.from, h.to-1) }

// command sends every host one command line (see followCommands).
func (hs *agentHosts) command(line func(h *agentHost) string) error {
	var errs []error
	for _, h := range hs.hosts {
		if _, err := io.WriteString(h.stdin, line(h)+"\n"); err != nil {
			errs = append(errs, fmt.Errorf("the agent host of nodes %d to %d: %w", h.from, h.to-1, err))
		}
	}
	return errors.Join(errs...)
}

// agentHostMain is the child: it serves the agents of its range of nodes,
// says "ready" on stdout, and stops when its stdin ends (the coordinator
// closed it, or died) or on SIGTERM.
func agentHostMain(args []string) error {
	fs := flag.NewFlagSet("fleet "+agentHostFlag, flag.ContinueOnError)
	from := fs.Int("from", 0, "the first node's index")
	to := fs.Int("to", 0, "the index after the last node's")
	root := fs.String("root", "", "the fleet's state directory")
	kubeconfig := fs.String("kubeconfig", "", "the API server's kubeconfig")
	fsync := fs.Bool("fsync", false, "fsync every store commit")
	auth := fs.Bool("auth", true, "serve TLS on each node's address and review tokens; false: unix sockets")
	cert := fs.String("tls-cert", "", "the agents' serving certificate")
	key := fs.String("tls-key", "", "its key")
	user := fs.String("reconciler-user", "", "the reconciler's user name in TokenReviews")
	nodes := fs.Int("nodes", 0, "the fleet's nodes")
	selected := fs.Int("select", 0, "how many of them the NodeConfig selects")
	idleWithoutStatusd := fs.Bool("idle-without-statusd", false, "run no statusd for the nodes not selected")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *root == "" || *kubeconfig == "" || *to <= *from || *to > *nodes || *selected < 1 || *selected > *nodes {
		return errors.New("want -root, -kubeconfig, -from < -to <= -nodes and 1 <= -select <= -nodes")
	}
	ctx, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stopSignals()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		followCommands(os.Stdin)
		cancel()
	}()
	raiseFileLimit(filesPerNode*(*to-*from) + 1024)
	kube, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	var sec *security
	if *auth {
		sec = &security{tls: pki.AgentTLS{CertFile: *cert, KeyFile: *key}, user: *user}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a, err := startAgents(ctx, kube, *root, *from, *to, *fsync, sec, selection{n: *nodes, sel: *selected}.withStatusd(*idleWithoutStatusd), log)
	if err != nil {
		a.stop()
		return err
	}
	fmt.Printf("ready: %d agents (nodes %d to %d), pid %d\n", *to-*from, *from, *to-1, os.Getpid())
	<-ctx.Done()
	a.stop()
	return nil
}
