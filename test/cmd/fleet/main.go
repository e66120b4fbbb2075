// Command fleet measures a rollout to a fleet of simulated nodes on a real
// API server: every node is a real Node object with a real checkpointd store
// and a real statusd, run in this process (thousands of processes would
// not fit the machine), talking gRPC over a unix socket each; the
// reconciler is the real binary. It prints how long the fleet takes to show
// a new config active, the reconciler's memory, and the API writes.
//
//	go run ./test/cmd/fleet -nodes 1000
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/procfs"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	checkpointd "nodeconfig.io/services/checkpointd/server"
	"nodeconfig.io/services/servekit/authn"
	statusd "nodeconfig.io/services/statusd/server"
	"nodeconfig.io/test/agenttls"
	"nodeconfig.io/test/audit"
	"nodeconfig.io/test/cluster"
	"nodeconfig.io/test/proc"
)

const (
	namespace = "fleet"
	label     = "nodeconfig.io/fleet"
)

func main() {
	nodes := flag.Int("nodes", 1000, "simulated nodes")
	fsync := flag.Bool("fsync", false, "fsync every store commit; all nodes share this machine's one disk, where real nodes each have their own, so off by default")
	workers := flag.Int("workers", 16, "the reconciler's --workers (its default)")
	keep := flag.Bool("keep", false, "keep the state directory")
	profiles := flag.String("profile", "", "write CPU profiles of the reconciler, the agents and the API server during the config change, and the reconciler's heap after it, to this directory")
	auth := flag.Bool("auth", true, "the installed path: each agent serves TLS on a loopback address of its own and checks the reconciler's per-node token with TokenReview; false: unix sockets, no authentication")
	flag.Parse()
	if err := run(*nodes, *fsync, *workers, *keep, *profiles, *auth); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

func run(n int, fsync bool, workers int, keep bool, profiles string, auth bool) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root, err := os.MkdirTemp("", "ncf-")
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(root)
	}
	fmt.Printf("fleet of %d nodes (fsync %v, authentication %v), state in %s\n", n, fsync, auth, root)
	raiseFileLimit(n)
	c, err := cluster.Start(ctx, cluster.Options{Dir: filepath.Join(root, "cluster"), AuditLog: true})
	if err != nil {
		return err
	}
	defer c.Stop()
	adminCfg := rest.CopyConfig(c.Config)
	adminCfg.QPS, adminCfg.Burst = 5000, 10000
	admin, err := kubernetes.NewForConfig(adminCfg)
	if err != nil {
		return err
	}

	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("fleet-%05d", i)
	}
	t0 := time.Now()
	if err := forEach(names, 64, func(name string) error {
		_, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name: name, Labels: map[string]string{label: "bench", "kubernetes.io/hostname": name},
		}}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("create nodes: %w", err)
	}
	fmt.Printf("  %d Node objects created in %v\n", n, since(t0))

	watch := newActiveWatch(admin, n)
	go watch.run(ctx)

	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	var sec *security
	if auth {
		if sec, err = newSecurity(ctx, admin, root); err != nil {
			return err
		}
	}
	t0 = time.Now()
	agents, err := startAgents(ctx, c, root, names, fsync, sec)
	if err != nil {
		return err
	}
	defer agents.stop()
	if err := watch.waitReported(ctx, 5*time.Minute); err != nil {
		return err
	}
	fmt.Printf("  %d agents started and reporting in %v\n", n, since(t0))

	reconciler, metricsAddr, err := startReconciler(c, root, workers, agents.reconcilerArgs(root, sec))
	if err != nil {
		return err
	}
	defer func() { _ = reconciler.Stop(10 * time.Second) }()

	dyn, err := dynamic.NewForConfig(adminCfg)
	if err != nil {
		return err
	}

	// First rollout: nothing assigned yet.
	start := time.Now()
	cm, err := admin.CoreV1().ConfigMaps(namespace).Create(ctx, configMap(1), metav1.CreateOptions{})
	if err != nil {
		return err
	}
	if err := createNodeConfig(ctx, dyn); err != nil {
		return err
	}
	first, err := watch.waitActive(ctx, cm.ResourceVersion, start, 5*time.Minute)
	if err != nil {
		return err
	}
	report("first rollout (nothing assigned before)", first)
	if err := watch.waitPromoted(ctx, cm.ResourceVersion, 5*time.Minute); err != nil {
		return err
	}

	// The figure: a config change on a fleet running its last-known-good.
	// The first rollout's trailing writes (status, events) land before
	// the count, not in the change's.
	writes := audit.NewLog(filepath.Join(c.Dir, "audit.log"))
	writesBefore, err := settledWrites(writes)
	if err != nil {
		return err
	}
	var stopProfiles func() error
	if profiles != "" {
		if stopProfiles, err = startProfiles(ctx, profiles, metricsAddr, admin); err != nil {
			return err
		}
	}
	start = time.Now()
	next := configMap(2)
	next.ResourceVersion = cm.ResourceVersion
	if cm, err = admin.CoreV1().ConfigMaps(namespace).Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		return err
	}
	change, err := watch.waitActive(ctx, cm.ResourceVersion, start, 5*time.Minute)
	if err != nil {
		return err
	}
	report("config change (target: all active <= 10 s)", change)
	if stopProfiles != nil {
		if err := stopProfiles(); err != nil {
			return err
		}
		fmt.Printf("  profiles in %s\n", profiles)
	}
	if err := watch.waitPromoted(ctx, cm.ResourceVersion, 5*time.Minute); err != nil {
		return err
	}
	writesAfter, err := settledWrites(writes)
	if err != nil {
		return err
	}
	fmt.Printf("  API writes for the change, to last-known-good: %.2f per node (%d in all; target <= 3)\n",
		float64(writesAfter-writesBefore)/float64(n), writesAfter-writesBefore)
	peak, rss, err := memory(reconciler.Pid())
	if err != nil {
		return err
	}
	fmt.Printf("  reconciler memory: peak RSS %d MiB, now %d MiB (target <= 100 MiB)\n", peak>>10, rss>>10)
	if b, err := fetch("http://" + metricsAddr + "/metrics"); err == nil {
		fmt.Printf("    (%s)\n", runtimeMemory(b))
	}
	// A Go benchmark line, so benchstat and the bench table read it.
	// Without authentication the name says so: the figure is the
	// installed path's.
	path := ""
	if !auth {
		path = "/noauth"
	}
	fmt.Printf("BenchmarkFleet/nodes=%d%s 1 %d ns/op %.2f all-active-s %.2f first-rollout-s %d p50-ms %d p99-ms %d reconciler-peak-rss-MiB %.2f writes/node/change\n",
		n, path, change.all().Nanoseconds(), change.all().Seconds(), first.all().Seconds(), change.pct(50).Milliseconds(), change.pct(99).Milliseconds(), peak>>10,
		float64(writesAfter-writesBefore)/float64(n))
	return nil
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }

// forEach runs fn over items with at most par at a time.
func forEach(items []string, par int, fn func(string) error) error {
	var g errgroup.Group
	g.SetLimit(par)
	for _, it := range items {
		g.Go(func() error { return fn(it) })
	}
	return g.Wait()
}

func configMap(v int) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kubelet", Namespace: namespace},
		Data:       map[string]string{"config.yaml": fmt.Sprintf("maxPods: %d\nlogging:\n  verbosity: 2\n", 100+v)},
	}
}

func createNodeConfig(ctx context.Context, dyn dynamic.Interface) error {
	_, err := dyn.Resource(v1alpha1.GroupVersionResource).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nodeconfig.io/v1alpha1", "kind": "NodeConfig",
		"metadata": map[string]any{"name": "fleet"},
		"spec": map[string]any{
			"nodeSelector": map[string]any{"matchLabels": map[string]any{label: "bench"}},
			"source":       map[string]any{"configMap": map[string]any{"namespace": namespace, "name": "kubelet", "key": "config.yaml"}},
			"soakSeconds":  int64(20),
			"rollout":      map[string]any{"maxInTrial": "100%"},
		},
	}}, metav1.CreateOptions{})
	return err
}

// agents are the in-process checkpointd and statusd of every node.
type agents struct {
	servers []*grpc.Server
	conns   []*grpc.ClientConn
	stores  []*checkpointd.Checkpointd
	addrs   map[string]string // node -> TCP address, with authentication
	mu      sync.Mutex
}

// security is what the installed path adds: the agents' serving
// certificate, and the reconciler's ServiceAccount whose per-node tokens the
// agents review.
type security struct {
	tls     agenttls.Files
	account string // NAMESPACE/NAME
	user    string // its user name in TokenReviews
}

const reconcilerAccount = "nodeconfig-reconciler"

func newSecurity(ctx context.Context, admin kubernetes.Interface, root string) (*security, error) {
	t, err := agenttls.New(filepath.Join(root, "tls"))
	if err != nil {
		return nil, err
	}
	if _, err := admin.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: reconcilerAccount}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	return &security{tls: t, account: namespace + "/" + reconcilerAccount, user: "system:serviceaccount:" + namespace + ":" + reconcilerAccount}, nil
}

// agentAddr gives node i a loopback address of its own, as nodes have, so
// every agent listens on the same port.
func agentAddr(i int) string {
	return fmt.Sprintf("127.%d.%d.%d:7601", 1+i/(250*250), (i/250)%250, 1+i%250)
}

// reconcilerArgs point the reconciler at the agents.
func (a *agents) reconcilerArgs(root string, sec *security) []string {
	if sec == nil {
		return []string{"--agent-socket-template", filepath.Join(root, "s", "{node}.sock")}
	}
	args := []string{"--agent-ca-file", sec.tls.CAFile, "--agent-tls-server-name", sec.tls.ServerName,
		"--agent-token-audience", agentAudience, "--agent-token-service-account", sec.account}
	for node, addr := range a.addrs {
		args = append(args, "--agent-address", node+"="+addr)
	}
	return args
}

const agentAudience = "nodeconfig-agent/{node}"

// serverOptions are an agent's gRPC server options: with authentication,
// TLS and the guard the installed checkpointd runs.
func (sec *security) serverOptions(node string, reviews authenticationv1client.TokenReviewInterface) ([]grpc.ServerOption, error) {
	if sec == nil {
		return nil, nil
	}
	creds, err := credentials.NewServerTLSFromFile(sec.tls.CertFile, sec.tls.KeyFile)
	if err != nil {
		return nil, err
	}
	g := authn.New(reviews, strings.ReplaceAll(agentAudience, "{node}", node), []string{sec.user}, nil)
	return []grpc.ServerOption{grpc.Creds(creds), grpc.InTapHandle(g.Tap()), grpc.ChainUnaryInterceptor(g.Unary()), grpc.ChainStreamInterceptor(g.Stream())}, nil
}

func startAgents(ctx context.Context, c *cluster.Cluster, root string, names []string, fsync bool, sec *security) (*agents, error) {
	logFile, err := os.Create(filepath.Join(root, "agents.log"))
	if err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// Every statusd has its own client and rate limit, as on real nodes;
	// they share one HTTP transport so the process does not open thousands
	// of connections.
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = 20, 40
	cfg.UserAgent = "nodeconfig-statusd/fleet"
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	// Each agent's TokenReviews go through a client of its own budget, as
	// checkpointd's do (sharing the transport, as statusd's here).
	reviewCfg := rest.CopyConfig(c.Config)
	reviewCfg.QPS, reviewCfg.Burst, reviewCfg.Timeout = 10, 20, 10*time.Second
	reviewCfg.UserAgent = "nodeconfig-checkpointd/fleet"
	reviewHTTP, err := rest.HTTPClientFor(reviewCfg)
	if err != nil {
		return nil, err
	}
	index := make(map[string]int, len(names))
	for i, name := range names {
		index[name] = i
	}
	a := &agents{addrs: map[string]string{}}
	err = forEach(names, 32, func(name string) error {
		dir := filepath.Join(root, "n", name)
		ckd, err := checkpointd.Open(checkpointd.Options{
			StateDir: filepath.Join(dir, "state"), TargetDir: filepath.Join(dir, "target"), TargetFile: "config.yaml",
			NoSync: !fsync, MaxWatchers: 4, Log: log.With("node", name),
		})
		if err != nil {
			return err
		}
		reviewClient, err := authenticationv1client.NewForConfigAndClient(reviewCfg, reviewHTTP)
		if err != nil {
			return err
		}
		opts, err := sec.serverOptions(name, reviewClient.TokenReviews())
		if err != nil {
			return err
		}
		srv := grpc.NewServer(opts...)
		ckd.Register(srv)
		socket := filepath.Join(root, "s", name+".sock")
		var l net.Listener
		if sec != nil {
			addr := agentAddr(index[name])
			if l, err = net.Listen("tcp", addr); err != nil {
				return err
			}
			a.mu.Lock()
			a.addrs[name] = addr
			a.mu.Unlock()
		} else {
			if err := os.MkdirAll(filepath.Dir(socket), 0o700); err != nil {
				return err
			}
			if l, err = net.Listen("unix", socket); err != nil {
				return err
			}
		}
		go func() { _ = srv.Serve(l) }()
		// statusd reaches its checkpointd in memory (as over its unix
		// socket, trusted): at 5,000 nodes two file descriptors per node
		// more would exhaust the process limit.
		mem := bufconn.Listen(256 << 10)
		memSrv := grpc.NewServer()
		ckd.Register(memSrv)
		go func() { _ = memSrv.Serve(mem) }()
		conn, err := grpc.NewClient("passthrough:///"+name, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return mem.DialContext(ctx) }))
		if err != nil {
			return err
		}
		client, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
		if err != nil {
			return err
		}
		sd, err := statusd.New(statusd.Options{
			Client: client, NodeName: name,
			Checkpointd: nodeconfigv1.NewCheckpointServiceClient(conn), Target: socket,
			StateFile: filepath.Join(dir, "reports.json"), SyncPeriod: 10 * time.Second, Log: log.With("node", name),
		})
		if err != nil {
			return err
		}
		go func() {
			if err := sd.Run(ctx); err != nil {
				log.Error("statusd stopped", "node", name, "err", err)
			}
		}()
		a.mu.Lock()
		a.servers, a.conns, a.stores = append(a.servers, srv, memSrv), append(a.conns, conn), append(a.stores, ckd)
		a.mu.Unlock()
		return nil
	})
	return a, err
}

func (a *agents) stop() {
	for _, c := range a.conns {
		_ = c.Close()
	}
	for _, s := range a.servers {
		s.Stop()
	}
	for _, s := range a.stores {
		_ = s.Close()
	}
}

func startReconciler(c *cluster.Cluster, root string, workers int, agentArgs []string) (p *proc.Process, metricsAddr string, err error) {
	bin, err := proc.Binary("reconciler")
	if err != nil {
		return nil, "", err
	}
	addr, err := proc.FreeAddr()
	if err != nil {
		return nil, "", err
	}
	if metricsAddr, err = proc.FreeAddr(); err != nil {
		return nil, "", err
	}
	p, err = proc.Start("reconciler", bin, append([]string{
		"--listen", addr, "--metrics-addr", metricsAddr, "--profiling", "--kubeconfig", c.Kubeconfig, "--leader-elect=false",
		"--workers", strconv.Itoa(workers),
	}, agentArgs...), filepath.Join(root, "reconciler.log"))
	return p, metricsAddr, err
}

// startProfiles records CPU profiles of the reconciler, this process (the
// agents) and the API server until the returned stop, which also takes the
// reconciler's heap profile.
func startProfiles(ctx context.Context, dir, reconcilerMetrics string, admin kubernetes.Interface) (stop func() error, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	agentsOut, err := os.Create(filepath.Join(dir, "agents.cpu.pprof"))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(agentsOut); err != nil {
		return nil, err
	}
	const seconds = "12"
	var g errgroup.Group
	save := func(name string, get func() ([]byte, error)) {
		g.Go(func() error {
			b, err := get()
			if err != nil {
				return fmt.Errorf("%s profile: %w", name, err)
			}
			return os.WriteFile(filepath.Join(dir, name), b, 0o644)
		})
	}
	httpGet := func(url string) func() ([]byte, error) {
		return func() ([]byte, error) { return fetch(url) }
	}
	save("reconciler.cpu.pprof", httpGet("http://"+reconcilerMetrics+"/debug/pprof/profile?seconds="+seconds))
	save("apiserver.cpu.pprof", func() ([]byte, error) {
		return admin.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", seconds).DoRaw(ctx)
	})
	return func() error {
		pprof.StopCPUProfile()
		_ = agentsOut.Close()
		err := g.Wait()
		if b, herr := httpGet("http://" + reconcilerMetrics + "/debug/pprof/heap")(); herr == nil {
			herr = os.WriteFile(filepath.Join(dir, "reconciler.heap.pprof"), b, 0o644)
			err = errors.Join(err, herr)
		} else {
			err = errors.Join(err, herr)
		}
		return err
	}, nil
}

// activeWatch follows every Node's config-status annotation and notes when
// each first shows the expected config active and last-known-good. Counts
// are kept as events arrive: rescanning every node on every event was the
// harness's own O(n²), a fifth of the CPU at 5,000 nodes.
type activeWatch struct {
	client kubernetes.Interface
	n      int
	mu     sync.Mutex
	cond   *sync.Cond
	status map[string]corev1.NodeConfigStatus
	seen   map[string]time.Time // node -> when its status last changed
	// The expected config and who shows it.
	want     string
	activeAt map[string]time.Time
	promoted map[string]bool
}

func newActiveWatch(client kubernetes.Interface, n int) *activeWatch {
	w := &activeWatch{client: client, n: n, status: map[string]corev1.NodeConfigStatus{}, seen: map[string]time.Time{}}
	w.cond = sync.NewCond(&w.mu)
	w.expectLocked("")
	return w
}

func (w *activeWatch) run(ctx context.Context) {
	factory := informers.NewSharedInformerFactory(w.client, 0)
	note := func(obj any) {
		node, ok := obj.(*corev1.Node)
		if !ok {
			return
		}
		raw, ok := node.Annotations[v1alpha1.NodeAnnotationConfigStatus]
		if !ok {
			return
		}
		var st corev1.NodeConfigStatus
		if json.Unmarshal([]byte(raw), &st) != nil {
			return
		}
		now := time.Now()
		w.mu.Lock()
		w.status[node.Name] = st
		w.seen[node.Name] = now
		w.countLocked(node.Name, st, now)
		w.cond.Broadcast()
		w.mu.Unlock()
	}
	_, _ = factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: note, UpdateFunc: func(_, obj any) { note(obj) },
	})
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
}

func (w *activeWatch) countLocked(name string, st corev1.NodeConfigStatus, at time.Time) {
	if w.want == "" {
		return
	}
	if _, ok := w.activeAt[name]; !ok && rv(st.Active) == w.want {
		w.activeAt[name] = at
	}
	if rv(st.LastKnownGood) == w.want {
		w.promoted[name] = true
	}
}

// expectLocked starts counting for a new config; statuses already showing
// it count with the time they were seen.
func (w *activeWatch) expectLocked(want string) {
	w.want, w.activeAt, w.promoted = want, map[string]time.Time{}, map[string]bool{}
	for name, st := range w.status {
		w.countLocked(name, st, w.seen[name])
	}
}

// wait blocks until done holds or timeout.
func (w *activeWatch) wait(ctx context.Context, timeout time.Duration, what string, done func() (bool, string)) error {
	deadline := time.AfterFunc(timeout, func() { w.mu.Lock(); w.cond.Broadcast(); w.mu.Unlock() })
	defer deadline.Stop()
	end := time.Now().Add(timeout)
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		ok, progress := done()
		if ok {
			return nil
		}
		if time.Now().After(end) || ctx.Err() != nil {
			return fmt.Errorf("timed out after %v waiting for %s: %s", timeout, what, progress)
		}
		w.cond.Wait()
	}
}

func (w *activeWatch) waitReported(ctx context.Context, timeout time.Duration) error {
	return w.wait(ctx, timeout, "every node's first status", func() (bool, string) {
		return len(w.status) == w.n, fmt.Sprintf("%d of %d reported", len(w.status), w.n)
	})
}

func rv(src *corev1.NodeConfigSource) string {
	if src == nil || src.ConfigMap == nil {
		return ""
	}
	return src.ConfigMap.ResourceVersion
}

// latencies are per-node times from the change to "active" on the Node.
type latencies []time.Duration

func (l latencies) pct(p int) time.Duration {
	s := slices.Clone(l)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func (l latencies) all() time.Duration { return slices.Max(l) }

func (w *activeWatch) waitActive(ctx context.Context, want string, start time.Time, timeout time.Duration) (latencies, error) {
	w.mu.Lock()
	w.expectLocked(want)
	w.mu.Unlock()
	err := w.wait(ctx, timeout, "every node active on "+want, func() (bool, string) {
		return len(w.activeAt) == w.n, fmt.Sprintf("%d of %d active", len(w.activeAt), w.n)
	})
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(latencies, 0, w.n)
	for _, at := range w.activeAt {
		out = append(out, at.Sub(start))
	}
	return out, nil
}

func (w *activeWatch) waitPromoted(ctx context.Context, want string, timeout time.Duration) error {
	return w.wait(ctx, timeout, "every node promoted to "+want, func() (bool, string) {
		return len(w.promoted) == w.n, fmt.Sprintf("%d of %d promoted", len(w.promoted), w.n)
	})
}

func report(what string, l latencies) {
	fmt.Printf("  %s: all %d active in %v (per node p50 %v, p99 %v)\n", what, len(l),
		l.all().Round(time.Millisecond), l.pct(50).Round(time.Millisecond), l.pct(99).Round(time.Millisecond))
}

// settledWrites counts nodeconfig's API writes, lease renewals aside, once
// they have stopped coming (the e2e tests' wait, audit.Settle quiet).
func settledWrites(l *audit.Log) (int, error) {
	w, err := l.Settled(audit.Settle, 2*time.Minute)
	return w.Total(), err
}

// memory reads a process's peak and current resident set size in KiB.
func memory(pid int) (peak, rss int64, err error) {
	proc, err := procfs.NewProc(pid)
	if err != nil {
		return 0, 0, err
	}
	st, err := proc.NewStatus()
	if err != nil {
		return 0, 0, err
	}
	return int64(st.VmHWM >> 10), int64(st.VmRSS >> 10), nil
}

// runtimeMemory summarises the Go runtime's memory gauges of a /metrics page.
func runtimeMemory(page []byte) string {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, name := range []string{"go_goroutines", "go_memstats_heap_inuse_bytes", "go_memstats_heap_idle_bytes",
		"go_memstats_heap_released_bytes", "go_memstats_stack_inuse_bytes", "go_memstats_sys_bytes"} {
		if f, ok := families[name]; ok && len(f.GetMetric()) == 1 {
			v, unit := f.GetMetric()[0].GetGauge().GetValue(), ""
			if name != "go_goroutines" {
				v, unit = v/(1<<20), " MiB"
			}
			parts = append(parts, fmt.Sprintf("%s %.0f%s", strings.TrimPrefix(name, "go_memstats_"), v, unit))
		}
	}
	return strings.Join(parts, ", ")
}

func fetch(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// raiseFileLimit makes room for a store and a socket per node and the
// connections to the API server; only root may raise the hard limit.
func raiseFileLimit(n int) {
	want := uint64(4*n + 4096)
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil || lim.Cur >= want {
		return
	}
	lim.Cur = want
	if lim.Max < want {
		lim.Max = want
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Fprintf(os.Stderr, "fleet: cannot raise the open file limit to %d (%v); large fleets may run out\n", want, err)
	}
}
