package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"nodeconfig.io/test/framework/cluster"
)

// makeStateDir creates the run's state directory, removed at the end
// unless -keep, and raises the open-file limit the fleet needs.
func (r *fleetRun) makeStateDir() error {
	root, err := os.MkdirTemp("", "ncf-")
	if err != nil {
		return err
	}
	r.root = root
	if !r.o.keep {
		r.onStop(func() { _ = os.RemoveAll(root) })
	}
	fmt.Printf("fleet of %d nodes (fsync %v, authentication %v), state in %s\n", r.n, r.o.fsync, r.o.auth, root)
	// This process's children inherit the limit: the API server holds a
	// connection per statusd too.
	want := filesPerNode*r.n + 4096
	if r.hosted {
		want = r.n + 4096
	}
	raiseFileLimit(want)
	return nil
}

// startCluster starts etcd and the API server, and the admin's client.
func (r *fleetRun) startCluster() error {
	c, err := cluster.Start(r.ctx, cluster.Options{Dir: filepath.Join(r.root, "cluster"), AuditLog: true, PriorityAndFairness: r.o.priorityAndFairness})
	if err != nil {
		return err
	}
	r.c = c
	r.onStop(c.Stop)
	r.adminCfg = rest.CopyConfig(c.Config)
	r.adminCfg.QPS, r.adminCfg.Burst = 5000, 10000
	r.admin, err = kubernetes.NewForConfig(r.adminCfg)
	return err
}

// createNodes creates the fleet's Node objects, labelled selected or idle,
// starts watching their status, and creates the fleet's namespace.
func (r *fleetRun) createNodes() error {
	t0 := time.Now()
	if err := forEach(r.n, 64, func(i int) error {
		name, role := nodeName(i), "bench"
		if !r.chosen.selected(i) {
			role = "idle"
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name: name, Labels: map[string]string{label: role, "kubernetes.io/hostname": name},
		}}
		if r.o.kubeletLikeNodes {
			kubeletLikeNode(node, i)
		}
		_, err := r.admin.CoreV1().Nodes().Create(r.ctx, node, metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("create nodes: %w", err)
	}
	size, err := storedSize(r.ctx, r.admin, nodeName(0))
	if err != nil {
		return err
	}
	fmt.Printf("  %d Node objects created in %v, %s\n", r.n, since(t0), size)
	if r.sel < r.n {
		idle := "the agents"
		if r.o.idleWithoutStatusd {
			idle = "the checkpointds (no statusd)"
		}
		fmt.Printf("  the NodeConfig selects %d of them; %s of the other %d run idle\n", r.sel, idle, r.n-r.sel)
	}

	r.watch = newActiveWatch(r.admin, r.reporting, r.sel)
	go r.watch.run(r.ctx)

	_, err = r.admin.CoreV1().Namespaces().Create(r.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	return err
}

// setUpAuth, with -auth, sets up the agents' TLS and tokens and, for a
// fleet of more than one node, waits for the agents' admission policy.
func (r *fleetRun) setUpAuth() error {
	if !r.o.auth {
		return nil
	}
	var err error
	if r.sec, err = newSecurity(r.ctx, r.admin, r.c.Kubeconfig, r.root); err != nil {
		return err
	}
	if r.n > 1 {
		if r.policy, err = newPolicyProbe(r.ctx, r.c.Config); err != nil {
			return err
		}
		if err := r.policy.wait(r.ctx, true); err != nil {
			return err
		}
	}
	return nil
}

// raiseFileLimit raises the soft open-file limit to the hard one, which is
// as far as a process without CAP_SYS_RESOURCE may go, and says so when
// that is less than want.
func raiseFileLimit(want int) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Fprintf(os.Stderr, "fleet: open file limit: %v\n", err)
		return
	}
	// Set even when Go raised it already at start: that raise is undone
	// in child processes, a Setrlimit of our own is not, and the API
	// server and the reconciler need it too.
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Fprintf(os.Stderr, "fleet: cannot raise the open file limit to %d (%v)\n", lim.Max, err)
		return
	}
	if lim.Cur < uint64(want) {
		fmt.Fprintf(os.Stderr, "fleet: the open file limit is %d, about %d wanted; this fleet may run out (fewer -agents-per-process, or a higher hard limit)\n", lim.Cur, want)
	}
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }

// forEach runs fn for 0 to n-1 with at most par at a time.
func forEach(n, par int, fn func(i int) error) error {
	var g errgroup.Group
	g.SetLimit(par)
	for i := range n {
		g.Go(func() error { return fn(i) })
	}
	return g.Wait()
}
