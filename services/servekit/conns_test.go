package servekit

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/emptypb"
)

// dialFrom connects to addr from a given loopback address, as a caller on
// another host would.
func dialFrom(t testing.TB, ts *tokenServer, from string) *grpc.ClientConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	conn, err := grpc.NewClient(ts.addr, grpc.WithTransportCredentials(ts.tls),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// holdWatches opens perHost health Watches, each on its own connection,
// from every address, and returns once each has been answered or refused.
// Health needs no token, so anyone who reaches the port can do this.
func holdWatches(t testing.TB, ts *tokenServer, ctx context.Context, hosts []string, perHost int) (held int) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, host := range hosts {
		for range perHost {
			conn := dialFrom(t, ts, host)
			wg.Go(func() {
				wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
				if err != nil {
					return
				}
				got := make(chan error, 1)
				go func() { _, err := w.Recv(); got <- err }()
				select {
				case err := <-got:
					if err == nil {
						mu.Lock()
						held++
						mu.Unlock()
					}
				case <-wctx.Done():
				}
			})
		}
	}
	wg.Wait()
	return held
}

// echo calls the authenticated method with token on a new connection from
// 127.0.0.1, as the reconciler does on its first call to an agent.
func echo(t testing.TB, ts *tokenServer, token string, timeout time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token), timeout)
	defer cancel()
	conn := dialFrom(t, ts, "127.0.0.1")
	defer conn.Close()
	return conn.Invoke(ctx, "/servekit.test.Echo/Echo", &emptypb.Empty{}, &emptypb.Empty{}, grpc.WaitForReady(true))
}

func waitServing(t testing.TB, ts *tokenServer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn := dialFrom(t, ts, "127.0.0.1")
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatal(err)
	}
}

// Health needs no token (probes), and a Watch holds its connection open.
// Callers on 8 hosts, each holding its per-host share of connections with a
// Watch on each, must still leave the reconciler room for its
// authenticated calls.
func TestHealthWatchesFromEightHostsLeaveRoomForAuthenticatedCalls(t *testing.T) {
	ts := startTokenServer(t, commonFlags{})
	waitServing(t, ts)
	var hosts []string
	for i := 2; i <= 9; i++ {
		hosts = append(hosts, fmt.Sprintf("127.0.0.%d", i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	held := holdWatches(t, ts, ctx, hosts, maxConnsPerHost)
	t.Logf("%d health Watches held from %d hosts", held, len(hosts))

	token := newSigner(t, "k").mint(t, ReconcilerIdentity, testAudience)
	if err := echo(t, ts, token, 10*time.Second); err != nil {
		t.Fatalf("the reconciler's call while %d Watches are held: %v", held, err)
	}
}
