package servekit

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

func freeLoopbackAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Headers are bounded before any check of the caller looks at them, on
// the gRPC ports and on the metrics port alike.
func TestHeadersAreBoundedOnEveryPort(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "s.sock")
	metrics := freeLoopbackAddr(t)
	s, err := newServer(commonFlags{Socket: socket, MetricsAddr: metrics, Auth: "none", MetricsAuth: "none"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, "test.Service") }()
	t.Cleanup(func() { cancel(); <-served })

	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	call := func(headerBytes int) error {
		cctx, ccancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "x-pad", strings.Repeat("a", headerBytes)), 10*time.Second)
		defer ccancel()
		_, err := health.Check(cctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		return err
	}
	if err := call(1 << 10); err != nil {
		t.Fatalf("a call with a token's worth of headers: %v", err)
	}
	if err := call(64 << 10); err == nil {
		t.Fatal("a call with 64 KiB of headers was served")
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/healthz", metrics), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Pad", strings.Repeat("a", 64<<10))
	var resp *http.Response
	deadline := time.Now().Add(10 * time.Second)
	for {
		if resp, err = http.DefaultClient.Do(req); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("metrics port answered %s to 64 KiB of headers; want 431", resp.Status)
	}
}
