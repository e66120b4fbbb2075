// Package sim runs simulated nodes and the reconciler as real processes
// against a real control plane: a Node object plus checkpointd and statusd
// with their own state dirs and sockets per node. Many run side by side.
package sim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/test/framework/cluster"
	"nodeconfig.io/test/framework/proc"
)

// TargetFile is the file name the simulated nodes materialize.
const TargetFile = "config.yaml"

// Node is one simulated node.
type Node struct {
	Name            string
	Dir             string
	TargetDir       string
	Socket          string
	StatusdSocket   string
	CheckpointdAddr string
	StatusdAddr     string
	Checkpointd     *proc.Process
	Statusd         *proc.Process
	conn            *grpc.ClientConn
}

// SocketTemplate is the reconciler's --agent-socket-template for nodes
// started under root.
func SocketTemplate(root string) string {
	return filepath.Join(root, "nodes", "{node}", "checkpointd.sock")
}

// NodeOptions fix what StartNode otherwise picks.
type NodeOptions struct {
	Labels          map[string]string
	CheckpointdAddr string // default: a free loopback port
	StatusdAddr     string // default: a free loopback port
	StatusdArgs     []string
	CheckpointdArgs []string
	// KubeletConfig, when set, is the node's kubelet base config (its
	// --config file): checkpointd judges kubelet drop-ins merged with it.
	KubeletConfig string
}

// StartNode creates the Node object (if missing) and starts its agents.
func StartNode(ctx context.Context, c *cluster.Cluster, root, name string, labels map[string]string, statusdArgs ...string) (*Node, error) {
	return StartNodeWith(ctx, c, root, name, NodeOptions{Labels: labels, StatusdArgs: statusdArgs})
}

// StartNodeWith is StartNode with every option.
func StartNodeWith(ctx context.Context, c *cluster.Cluster, root, name string, o NodeOptions) (*Node, error) {
	// "{node}" in an argument is the node's name, as $(NODE_NAME) is in the
	// DaemonSet.
	expand := func(args []string) []string {
		out := make([]string, len(args))
		for i, a := range args {
			out[i] = strings.ReplaceAll(a, "{node}", name)
		}
		return out
	}
	labels, statusdArgs := o.Labels, expand(o.StatusdArgs)
	dir := filepath.Join(root, "nodes", name)
	n := &Node{
		Name: name, Dir: dir, TargetDir: filepath.Join(dir, "target"),
		Socket: filepath.Join(dir, "checkpointd.sock"), StatusdSocket: filepath.Join(dir, "statusd.sock"),
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// The hostname label, as the kubelet sets it.
	all := map[string]string{"kubernetes.io/hostname": name}
	for k, v := range labels {
		all[k] = v
	}
	labels = all
	_, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create Node %s: %w", name, err)
	}
	ckBin, err := proc.Binary("checkpointd")
	if err != nil {
		return nil, err
	}
	stBin, err := proc.Binary("statusd")
	if err != nil {
		return nil, err
	}
	n.CheckpointdAddr, n.StatusdAddr = o.CheckpointdAddr, o.StatusdAddr
	if n.CheckpointdAddr == "" {
		if n.CheckpointdAddr, err = proc.FreeAddr(); err != nil {
			return nil, err
		}
	}
	if n.StatusdAddr == "" {
		if n.StatusdAddr, err = proc.FreeAddr(); err != nil {
			return nil, err
		}
	}
	ckArgs := []string{
		"--listen", n.CheckpointdAddr, "--socket", n.Socket, "--metrics-addr", "",
		"--state-dir", filepath.Join(dir, "state"), "--target-dir", n.TargetDir, "--target-file", TargetFile,
	}
	if o.KubeletConfig != "" {
		base := filepath.Join(dir, "kubelet-config.yaml")
		if err := os.WriteFile(base, []byte(o.KubeletConfig), 0o644); err != nil {
			return nil, err
		}
		ckArgs = append(ckArgs, "--kubelet-config", base)
	}
	n.Checkpointd, err = proc.Start(name+"/checkpointd", ckBin, append(ckArgs, expand(o.CheckpointdArgs)...), filepath.Join(dir, "checkpointd.log"))
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--listen", n.StatusdAddr, "--socket", n.StatusdSocket, "--metrics-addr", "",
		"--kubeconfig", c.Kubeconfig, "--node-name", name, "--checkpointd", "unix://" + n.Socket,
		"--state-file", filepath.Join(dir, "statusd-reports.json"),
		// A simulated node writes as the cluster's admin, whom no policy
		// confines (test/integration checks the policies and the check).
		"--admission-policy=",
	}, statusdArgs...)
	n.Statusd, err = proc.Start(name+"/statusd", stBin, args, filepath.Join(dir, "statusd.log"))
	if err != nil {
		n.Stop()
		return nil, err
	}
	// The socket, not the TCP port: the port may want TLS and a token.
	if err := WaitServing("unix://"+n.Socket, 20*time.Second); err != nil {
		n.Stop()
		return nil, fmt.Errorf("checkpointd of %s: %w\n%s", name, err, n.Checkpointd.Tail(2000))
	}
	if n.conn, err = Dial("unix://" + n.Socket); err != nil {
		n.Stop()
		return nil, err
	}
	return n, nil
}

// Checkpoint is a client of the node's checkpointd.
func (n *Node) Checkpoint() nodeconfigv1.CheckpointServiceClient {
	return nodeconfigv1.NewCheckpointServiceClient(n.conn)
}

// Target reads the materialized file; ok is false when it does not exist.
func (n *Node) Target() (content string, ok bool) {
	b, err := os.ReadFile(filepath.Join(n.TargetDir, TargetFile))
	return string(b), err == nil
}

// WaitTargetGone waits until the materialized file is gone. A reset
// records the local default first and removes the file after it, so the
// file may outlive the records by a moment.
func (n *Node) WaitTargetGone(timeout time.Duration) error {
	return proc.WaitFor(timeout, func() (bool, error) {
		_, ok := n.Target()
		return !ok, nil
	})
}

// Stop stops the agents (SIGTERM, then SIGKILL).
func (n *Node) Stop() {
	if n.conn != nil {
		_ = n.conn.Close()
	}
	for _, p := range []*proc.Process{n.Statusd, n.Checkpointd} {
		if p != nil {
			_ = p.Stop(10 * time.Second)
		}
	}
}

// Logs returns the tails of the node's logs.
func (n *Node) Logs() string {
	return fmt.Sprintf("--- %s\n%s\n--- %s\n%s\n", n.Checkpointd.LogPath, n.Checkpointd.Tail(3000), n.Statusd.LogPath, n.Statusd.Tail(3000))
}

// Reconciler is a running reconciler process.
type Reconciler struct {
	Addr string
	*proc.Process
	conn *grpc.ClientConn
}

// StartReconciler starts a reconciler that finds agents under root.
func StartReconciler(ctx context.Context, c *cluster.Cluster, root, identity string, extra ...string) (*Reconciler, error) {
	return StartReconcilerAt(ctx, c, root, identity, "", extra...)
}

// StartReconcilerAt is StartReconciler on a given address ("" = a free port).
func StartReconcilerAt(ctx context.Context, c *cluster.Cluster, root, identity, addr string, extra ...string) (*Reconciler, error) {
	bin, err := proc.Binary("reconciler")
	if err != nil {
		return nil, err
	}
	if err := EnsureNamespace(ctx, c, "nodeconfig-system"); err != nil {
		return nil, err
	}
	if addr == "" {
		if addr, err = proc.FreeAddr(); err != nil {
			return nil, err
		}
	}
	args := append([]string{
		"--listen", addr, "--metrics-addr", "", "--kubeconfig", c.Kubeconfig,
		"--agent-socket-template", SocketTemplate(root), "--identity", identity,
		"--retry-base-delay", "200ms", "--retry-max-delay", "2s", "--admission-policy=",
	}, extra...)
	p, err := proc.Start("reconciler/"+identity, bin, args, filepath.Join(root, "reconciler-"+identity+".log"))
	if err != nil {
		return nil, err
	}
	r := &Reconciler{Addr: addr, Process: p}
	if err := WaitServing(addr, 20*time.Second); err != nil {
		_ = p.Stop(5 * time.Second)
		return nil, fmt.Errorf("reconciler: %w\n%s", err, p.Tail(2000))
	}
	if r.conn, err = Dial(addr); err != nil {
		return nil, err
	}
	return r, nil
}

// Client is a ReconcilerService client.
func (r *Reconciler) Client() nodeconfigv1.ReconcilerServiceClient {
	return nodeconfigv1.NewReconcilerServiceClient(r.conn)
}

// Close stops the reconciler.
func (r *Reconciler) Close() {
	_ = r.conn.Close()
	_ = r.Stop(10 * time.Second)
}

// EnsureNamespace creates a namespace if it is missing.
func EnsureNamespace(ctx context.Context, c *cluster.Cluster, name string) error {
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// Dial connects to a test server with a short reconnect backoff: the
// default (1 s and growing) would make every restart in a test slow.
func Dial(target string) (*grpc.ClientConn, error) {
	return grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
}

// WaitServing waits for grpc.health.v1 to answer SERVING at target.
func WaitServing(target string, timeout time.Duration) error {
	conn, err := Dial(target)
	if err != nil {
		return err
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	return proc.WaitFor(timeout, func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return false, err
		}
		return resp.GetStatus() == healthpb.HealthCheckResponse_SERVING, nil
	})
}

// StartCheckpointd starts a lone checkpointd on a unix socket in dir (no
// TCP, no metrics), with its state and target under dir; extra flags are
// appended. It does not wait: pair it with WaitServing("unix://"+socket).
func StartCheckpointd(dir string, extra ...string) (p *proc.Process, socket string, err error) {
	return StartCheckpointdThrough(dir, nil, extra...)
}

// Launcher says what to start to run program: another binary that becomes
// it (powercut.Disk.Command), with environment entries for that one.
type Launcher func(program string) (path string, env []string, err error)

// StartCheckpointdThrough is StartCheckpointd started through launch (nil:
// directly).
func StartCheckpointdThrough(dir string, launch Launcher, extra ...string) (p *proc.Process, socket string, err error) {
	bin, err := proc.Binary("checkpointd")
	if err != nil {
		return nil, "", err
	}
	var env []string
	if launch != nil {
		if bin, env, err = launch(bin); err != nil {
			return nil, "", err
		}
	}
	socket = filepath.Join(dir, "ck.sock")
	args := append([]string{"--listen", "", "--socket", socket, "--metrics-addr", "",
		"--state-dir", filepath.Join(dir, "state"), "--target-dir", filepath.Join(dir, "target"), "--target-file", TargetFile}, extra...)
	p, err = proc.Start("checkpointd", bin, args, filepath.Join(dir, "checkpointd.log"), env...)
	return p, socket, err
}

// LoneCheckpointd is StartCheckpointd for a test: it waits until the
// process serves and returns it with its socket and a client on it; the
// test's cleanup kills the process and closes the client.
func LoneCheckpointd(t testing.TB, dir string, extra ...string) (p *proc.Process, socket string, client nodeconfigv1.CheckpointServiceClient) {
	t.Helper()
	return LoneCheckpointdThrough(t, dir, nil, extra...)
}

// LoneCheckpointdThrough is LoneCheckpointd started through launch.
func LoneCheckpointdThrough(t testing.TB, dir string, launch Launcher, extra ...string) (p *proc.Process, socket string, client nodeconfigv1.CheckpointServiceClient) {
	t.Helper()
	p, socket, err := StartCheckpointdThrough(dir, launch, extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	if err := WaitServing("unix://"+socket, 20*time.Second); err != nil {
		t.Fatalf("checkpointd: %v\n%s", err, p.Tail(2000))
	}
	conn, err := Dial("unix://" + socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return p, socket, nodeconfigv1.NewCheckpointServiceClient(conn)
}
