package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	checkpointd "nodeconfig.io/services/checkpointd/server"
	"nodeconfig.io/services/servekit/authn"
	statusd "nodeconfig.io/services/statusd/server"
	"nodeconfig.io/test/framework/pki"
)

// nodeName is node i's name; agentAddr its agent's address. Both follow
// from the index alone, so the coordinator names every node and builds the
// reconciler's arguments whichever process hosts the node's agents.
func nodeName(i int) string { return fmt.Sprintf("fleet-%05d", i) }

// agentAddr gives node i a loopback address of its own, as nodes have, so
// every agent listens on the same port.
func agentAddr(i int) string {
	return fmt.Sprintf("127.%d.%d.%d:7601", 1+i/(250*250), (i/250)%250, 1+i%250)
}

// agentSocket is node's unix socket without authentication.
func agentSocket(root, node string) string { return filepath.Join(root, "s", node+".sock") }

// agents are the checkpointd and statusd of the nodes one process hosts.
type agents struct {
	servers []*grpc.Server
	conns   []*grpc.ClientConn
	stores  []*checkpointd.Checkpointd
	mu      sync.Mutex
}

// security is what the installed path adds: the agents' serving
// certificate, the reconciler's ServiceAccount whose per-node tokens the
// agents review, and the agents' own ServiceAccounts (deploy/rbac.yaml),
// whose tokens, bound to each node's Node, every statusd writes with
// (statusd's) and every checkpointd reviews with (checkpointd's), under
// the install's RBAC and admission policy.
type security struct {
	tls     pki.AgentTLS
	account string // NAMESPACE/NAME
	user    string // its user name in TokenReviews
}

const reconcilerAccount = "nodeconfig-reconciler"

func newSecurity(ctx context.Context, admin kubernetes.Interface, kubeconfig, root string) (*security, error) {
	t, err := pki.NewAgentTLS(filepath.Join(root, "tls"))
	if err != nil {
		return nil, err
	}
	if _, err := admin.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: reconcilerAccount}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNamespace}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if err := installAgentAccess(ctx, kubeconfig); err != nil {
		return nil, fmt.Errorf("install deploy/rbac.yaml: %w", err)
	}
	return &security{tls: t, account: namespace + "/" + reconcilerAccount, user: "system:serviceaccount:" + namespace + ":" + reconcilerAccount}, nil
}

// reconcilerArgs point the reconciler at the agents of nodes 0 to n-1.
func reconcilerArgs(root string, n int, sec *security) []string {
	if sec == nil {
		return []string{"--agent-socket-template", agentSocket(root, "{node}")}
	}
	args := []string{"--agent-ca-file", sec.tls.CAFile, "--agent-tls-server-name", sec.tls.ServerName,
		"--agent-token-audience", agentAudience, "--agent-token-service-account", sec.account}
	for i := range n {
		args = append(args, "--agent-address", nodeName(i)+"="+agentAddr(i))
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

// startAgents starts the agents of nodes from to to-1 in this process.
// Serving, each holds about filesPerNode open files.
func startAgents(ctx context.Context, kube *rest.Config, root string, from, to int, fsync bool, sec *security, withStatusd func(i int) bool, log *slog.Logger) (*agents, error) {
	// Every statusd has its own client, rate limit and HTTP transport (its
	// own connection to the API server), as a statusd process on a real
	// node has. A Proxy func keeps client-go from sharing one cached
	// transport between clients of the same TLS config; it proxies nothing.
	// With the installed path's authentication each uses the node's token
	// of its own ServiceAccount instead of kube's admin credentials.
	var statusTokens, agentTokens []string
	if sec != nil {
		var err error
		if statusTokens, err = nodeTokens(ctx, kube, statusAccount, from, to); err != nil {
			return nil, err
		}
		if agentTokens, err = nodeTokens(ctx, kube, agentAccount, from, to); err != nil {
			return nil, err
		}
	}
	client := func(tokens []string, i int, qps float32, burst int, userAgent string) *rest.Config {
		var cfg *rest.Config
		if sec != nil {
			cfg = asAgent(kube, tokens[i-from])
		} else {
			cfg = rest.CopyConfig(kube)
		}
		cfg.QPS, cfg.Burst, cfg.UserAgent = qps, burst, userAgent
		return cfg
	}
	a := &agents{}
	var g errgroup.Group
	g.SetLimit(32)
	for i := from; i < to; i++ {
		g.Go(func() error {
			cfg := client(statusTokens, i, 20, 40, "nodeconfig-statusd/fleet")
			cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
			// Each agent's TokenReviews go through a client of its own
			// budget, as checkpointd's do; client-go shares one cached
			// transport between them, one file less per node (reviews
			// are rare: one per token the reconciler mints).
			reviewCfg := client(agentTokens, i, 10, 20, "nodeconfig-checkpointd/fleet")
			reviewCfg.Timeout = 10 * time.Second
			return a.start(ctx, i, root, fsync, sec, withStatusd(i), cfg, reviewCfg, log)
		})
	}
	return a, g.Wait()
}

// start starts node i's checkpointd and, if asked, its statusd.
func (a *agents) start(ctx context.Context, i int, root string, fsync bool, sec *security, withStatusd bool, cfg, reviewCfg *rest.Config, log *slog.Logger) error {
	name := nodeName(i)
	dir := filepath.Join(root, "n", name)
	ckd, err := checkpointd.Open(checkpointd.Options{
		StateDir: filepath.Join(dir, "state"), TargetDir: filepath.Join(dir, "target"), TargetFile: "config.yaml",
		NoSync: !fsync, MaxWatchers: 4, Log: log.With("node", name),
	})
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.stores = append(a.stores, ckd)
	a.mu.Unlock()
	reviewClient, err := authenticationv1client.NewForConfig(reviewCfg)
	if err != nil {
		return err
	}
	opts, err := sec.serverOptions(name, reviewClient.TokenReviews())
	if err != nil {
		return err
	}
	srv := grpc.NewServer(opts...)
	ckd.Register(srv)
	socket := agentSocket(root, name)
	var l net.Listener
	if sec != nil {
		if l, err = net.Listen("tcp", agentAddr(i)); err != nil {
			return err
		}
	} else {
		if err := os.MkdirAll(filepath.Dir(socket), 0o700); err != nil {
			return err
		}
		if l, err = net.Listen("unix", socket); err != nil {
			return err
		}
	}
	go func() { _ = srv.Serve(l) }()
	a.mu.Lock()
	a.servers = append(a.servers, srv)
	a.mu.Unlock()
	if !withStatusd {
		return nil
	}
	// statusd reaches its checkpointd in memory (as over its unix socket,
	// trusted): two files per node more would not fit the open-file limit.
	mem := bufconn.Listen(256 << 10)
	memSrv := grpc.NewServer()
	ckd.Register(memSrv)
	go func() { _ = memSrv.Serve(mem) }()
	a.mu.Lock()
	a.servers = append(a.servers, memSrv)
	a.mu.Unlock()
	conn, err := grpc.NewClient("passthrough:///"+name, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return mem.DialContext(ctx) }))
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.conns = append(a.conns, conn)
	a.mu.Unlock()
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	sd, err := statusd.New(statusd.Options{
		Client: client, NodeName: name,
		Checkpointd: nodeconfigv1.NewCheckpointServiceClient(conn), Target: socket,
		StateFile: filepath.Join(dir, "reports.json"), Log: log.With("node", name),
	})
	if err != nil {
		return err
	}
	go func() {
		if err := sd.Run(ctx); err != nil {
			log.Error("statusd stopped", "node", name, "err", err)
		}
	}()
	return nil
}

func (a *agents) stop() {
	if a == nil {
		return
	}
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
