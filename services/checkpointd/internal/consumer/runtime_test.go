package consumer

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fakeCRI is a container runtime's CRI endpoint that only answers Status.
type fakeCRI struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	mu    sync.Mutex
	conds []*runtimeapi.RuntimeCondition
}

func (f *fakeCRI) set(conds ...*runtimeapi.RuntimeCondition) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.conds = conds
}

func (f *fakeCRI) Status(context.Context, *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: f.conds}}, nil
}

// serveCRI serves f on a unix socket in a fresh directory and returns the
// socket's path.
func serveCRI(t *testing.T, f *fakeCRI) (string, *grpc.Server) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cri.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, f)
	served := make(chan struct{})
	go func() { _ = srv.Serve(lis); close(served) }()
	t.Cleanup(func() { srv.Stop(); <-served })
	return sock, srv
}

func cond(typ string, ok bool, reason, message string) *runtimeapi.RuntimeCondition {
	return &runtimeapi.RuntimeCondition{Type: typ, Status: ok, Reason: reason, Message: message}
}

func ready(t *testing.T, r CRI) (bool, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return r.Ready(ctx)
}

func TestCRIReadyFollowsRuntimeReady(t *testing.T) {
	f := &fakeCRI{}
	sock, _ := serveCRI(t, f)
	r := CRI{Endpoint: "unix://" + sock}
	// No CNI yet: the kubelet starts and is healthy without a network.
	f.set(cond(runtimeapi.RuntimeReady, true, "", ""), cond(runtimeapi.NetworkReady, false, "NetworkPluginNotReady", "cni plugin not initialized"))
	if ok, detail := ready(t, r); !ok {
		t.Fatalf("not ready (%s) with RuntimeReady true", detail)
	}
	f.set(cond(runtimeapi.RuntimeReady, false, "ContainerdNotReady", "cri plugin is starting"), cond(runtimeapi.NetworkReady, true, "", ""))
	if ok, detail := ready(t, r); ok || !strings.Contains(detail, "ContainerdNotReady") || !strings.Contains(detail, "cri plugin is starting") {
		t.Fatalf("ready %v (%q) with RuntimeReady false, want not ready in the runtime's words", ok, detail)
	}
	f.set(cond(runtimeapi.NetworkReady, true, "", ""))
	if ok, detail := ready(t, r); ok || !strings.Contains(detail, runtimeapi.RuntimeReady) {
		t.Fatalf("ready %v (%q) without a RuntimeReady condition, want not ready", ok, detail)
	}
	// A bare socket path works as the kubelet's deprecated form does.
	f.set(cond(runtimeapi.RuntimeReady, true, "", ""))
	if ok, detail := ready(t, CRI{Endpoint: sock}); !ok {
		t.Fatalf("not ready (%s) through the bare socket path", detail)
	}
}

func TestCRINotReadyWhenTheRuntimeIsDown(t *testing.T) {
	f := &fakeCRI{}
	f.set(cond(runtimeapi.RuntimeReady, true, "", ""))
	sock, srv := serveCRI(t, f)
	r := CRI{Endpoint: "unix://" + sock, Timeout: 10 * time.Second}
	if ok, detail := ready(t, r); !ok {
		t.Fatalf("not ready (%s) while it serves", detail)
	}
	srv.Stop()
	if ok, detail := ready(t, r); ok || !strings.Contains(detail, sock) {
		t.Fatalf("ready %v (%q) after the runtime stopped, want not ready naming its socket", ok, detail)
	}
	absent := CRI{Endpoint: "unix://" + filepath.Join(t.TempDir(), "absent.sock"), Timeout: 10 * time.Second}
	if ok, detail := ready(t, absent); ok || !strings.Contains(detail, "absent.sock") {
		t.Fatalf("ready %v (%q) without a socket, want not ready", ok, detail)
	}
}

func TestCRIEndpointIsAUnixSocket(t *testing.T) {
	for _, e := range []string{"", "tcp://127.0.0.1:1234", "npipe:////./pipe/containerd", "unix://relative.sock", "relative.sock"} {
		if _, err := ParseCRIEndpoint(e); err == nil {
			t.Errorf("ParseCRIEndpoint(%q) = nil error, want refused", e)
		}
	}
	for _, e := range []string{"unix:///run/containerd/containerd.sock", "/run/containerd/containerd.sock"} {
		if got, err := ParseCRIEndpoint(e); err != nil || got != "/run/containerd/containerd.sock" {
			t.Errorf("ParseCRIEndpoint(%q) = %q, %v", e, got, err)
		}
	}
}
