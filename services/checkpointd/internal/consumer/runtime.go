package consumer

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Runtime tells whether the node's container runtime is ready: a kubelet
// without one exits at start or turns unhealthy, through no fault of its
// config, so the gate asks before it blames the config.
type Runtime interface {
	// Ready reports whether the runtime is ready and, when not, why in its
	// own words.
	Ready(ctx context.Context) (bool, string)
}

// CRI asks a container runtime for its status over its CRI socket, as the
// kubelet does.
type CRI struct {
	// Endpoint is the kubelet's --container-runtime-endpoint, e.g.
	// unix:///run/containerd/containerd.sock (or the bare socket path).
	Endpoint string
	// Timeout bounds one question; 0 means 5 s.
	Timeout time.Duration
}

func (c CRI) String() string { return "CRI " + c.Endpoint }

// ParseCRIEndpoint returns the socket path of a unix CRI endpoint: the only
// kind a node agent next to the kubelet needs.
func ParseCRIEndpoint(endpoint string) (string, error) {
	path, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok && strings.Contains(endpoint, "://") {
		return "", fmt.Errorf("CRI endpoint %q: want unix:///path/to/socket", endpoint)
	}
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("CRI endpoint %q: want an absolute socket path, as unix:///run/containerd/containerd.sock", endpoint)
	}
	return filepath.Clean(path), nil
}

// Ready asks the runtime's Status. Only RuntimeReady counts: it is what the
// kubelet needs to start (getCgroupDriverFromCRI) and to run its sync loop,
// which its healthz reports. NetworkReady is false on a node whose CNI is
// not installed yet, where the kubelet still runs healthy; it only keeps the
// node NotReady.
func (c CRI) Ready(ctx context.Context) (bool, string) {
	path, err := ParseCRIEndpoint(c.Endpoint)
	if err != nil {
		return false, err.Error()
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// A connection per question: it is asked rarely (before a blame, and
	// once a period while the gate holds), and a runtime that restarts
	// leaves no stale connection behind.
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false, fmt.Sprintf("%s: %v", c.Endpoint, err)
	}
	defer conn.Close()
	resp, err := runtimeapi.NewRuntimeServiceClient(conn).Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return false, fmt.Sprintf("%s: CRI Status: %s", c.Endpoint, status.Convert(err).Message())
	}
	for _, cond := range resp.GetStatus().GetConditions() {
		if cond.GetType() != runtimeapi.RuntimeReady {
			continue
		}
		if cond.GetStatus() {
			return true, ""
		}
		return false, fmt.Sprintf("%s: %s is false: %s: %s", c.Endpoint, runtimeapi.RuntimeReady, cond.GetReason(), cond.GetMessage())
	}
	return false, fmt.Sprintf("%s: no %s condition in its status", c.Endpoint, runtimeapi.RuntimeReady)
}
