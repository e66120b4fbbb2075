// Package reconciler reaches the reconciler's gRPC API: at an address given
// (plaintext, as 'make run' and a port-forward expose it), or through a
// port-forward to the leader's pod, found from the Lease it holds.
package reconciler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	streamhttp "k8s.io/streaming/pkg/httpstream"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// Defaults of the shipped manifests (deploy/reconciler.yaml).
const (
	DefaultNamespace = "nodeconfig-system"
	DefaultLease     = "nodeconfig-reconciler"
	DefaultPort      = 7603
)

// Options say how to reach the reconciler.
type Options struct {
	// Address is host:port or unix:/path; empty: port-forward to the leader.
	Address string
	// Namespace, Lease and Port find the leader's pod and its gRPC port.
	Namespace string
	Lease     string
	Port      int
}

// Conn is a client of the reconciler; Close it.
type Conn struct {
	nodeconfigv1.ReconcilerServiceClient
	// Via says how it is reached, for the outputs.
	Via  string
	conn *grpc.ClientConn
	stop chan struct{}
}

// Close ends the connection and the port-forward.
func (c *Conn) Close() {
	if c == nil {
		return
	}
	if c.conn != nil {
		_ = c.conn.Close()
	}
	if c.stop != nil {
		close(c.stop)
	}
}

// Connect reaches the reconciler. With an address nothing is sent until the
// first call; without one the port-forward is up when it returns.
func Connect(ctx context.Context, o Options, cfg *rest.Config, kube kubernetes.Interface) (*Conn, error) {
	if o.Address != "" {
		conn, err := dial(o.Address)
		if err != nil {
			return nil, err
		}
		return &Conn{ReconcilerServiceClient: nodeconfigv1.NewReconcilerServiceClient(conn), Via: o.Address, conn: conn}, nil
	}
	leader, err := Leader(ctx, kube, o.Namespace, o.Lease)
	if err != nil {
		return nil, err
	}
	pod := leader.Name
	local, stop, err := forward(ctx, cfg, kube, o.Namespace, pod, o.Port)
	if err != nil {
		return nil, fmt.Errorf("port-forward to pod %s/%s port %d: %w", o.Namespace, pod, o.Port, err)
	}
	conn, err := dial(local)
	if err != nil {
		close(stop)
		return nil, err
	}
	return &Conn{
		ReconcilerServiceClient: nodeconfigv1.NewReconcilerServiceClient(conn),
		Via:                     fmt.Sprintf("pod %s/%s port %d (port-forward)", o.Namespace, pod, o.Port),
		conn:                    conn, stop: stop,
	}, nil
}

func dial(target string) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("reconciler address %q: %w", target, err)
	}
	return conn, nil
}

// Leader is the pod leading: the one the Lease's holderIdentity names,
// which the shipped manifests set to the pod's name
// (--identity=$(POD_NAME)). A default identity, hostname_pid, names its pod
// by the hostname.
func Leader(ctx context.Context, kube kubernetes.Interface, namespace, lease string) (*corev1.Pod, error) {
	l, err := kube.CoordinationV1().Leases(namespace).Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("find the reconciler's leader: Lease %s/%s: %w", namespace, lease, err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return nil, fmt.Errorf("find the reconciler's leader: Lease %s/%s has no holder (no reconciler is leading)", namespace, lease)
	}
	holder := *l.Spec.HolderIdentity
	candidates := []string{holder}
	if i := strings.LastIndex(holder, "_"); i > 0 {
		candidates = append(candidates, holder[:i])
	}
	for _, name := range candidates {
		pod, err := kube.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("find the reconciler's leader: pod %s/%s: %w", namespace, name, err)
		}
		if pod.Status.Phase != corev1.PodRunning {
			return nil, fmt.Errorf("the reconciler's leader, pod %s/%s, is %s", namespace, name, pod.Status.Phase)
		}
		return pod, nil
	}
	return nil, fmt.Errorf("find the reconciler's leader: Lease %s/%s is held by %q, which names no pod in %s (a reconciler outside the cluster? pass --reconciler ADDRESS)", namespace, lease, holder, namespace)
}

// forward port-forwards a free local port to the pod's port and returns its
// address and the channel that stops it.
func forward(ctx context.Context, cfg *rest.Config, kube kubernetes.Interface, namespace, pod string, port int) (string, chan struct{}, error) {
	url := kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return "", nil, err
	}
	dialer := spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	// As kubectl port-forward: websockets first, SPDY where they are refused.
	tunneling, err := portforward.NewSPDYOverWebsocketDialerForStreaming(url, cfg)
	if err != nil {
		return "", nil, err
	}
	dialer = portforward.NewFallbackDialerForStreaming(tunneling, dialer, func(err error) bool {
		return streamhttp.IsUpgradeFailure(err) || streamhttp.IsHTTPSProxyError(err)
	})
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddressesForStreaming(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		return "", nil, err
	}
	failed := make(chan error, 1)
	go func() { failed <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-failed:
		if err == nil {
			err = errors.New("port-forward ended before it was ready")
		}
		return "", nil, err
	case <-ctx.Done():
		close(stop)
		return "", nil, ctx.Err()
	case <-time.After(30 * time.Second):
		close(stop)
		return "", nil, errors.New("port-forward not ready within 30s")
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) == 0 {
		close(stop)
		return "", nil, fmt.Errorf("port-forward: no local port: %v", err)
	}
	return fmt.Sprintf("127.0.0.1:%d", ports[0].Local), stop, nil
}
