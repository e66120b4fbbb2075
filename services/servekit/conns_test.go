package servekit

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"nodeconfig.io/services/servekit/authn"
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

// holdConnections opens perHost connections from every address, each with
// a health Check and a Watch on it (no token: the Watch is refused, the
// connection stays), and returns how many are open when all have been
// answered, and how many Watches were served.
func holdConnections(t testing.TB, ts *tokenServer, hosts []string, perHost int) (open, watches int) {
	t.Helper()
	var conns []*grpc.ClientConn
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, host := range hosts {
		for range perHost {
			conn := dialFrom(t, ts, host)
			conns = append(conns, conn)
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				health := healthpb.NewHealthClient(conn)
				// Not waiting for ready: a connection refused is done with.
				if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
					return
				}
				w, err := health.Watch(context.Background(), &healthpb.HealthCheckRequest{})
				if err == nil {
					if _, err = w.Recv(); err == nil {
						mu.Lock()
						watches++
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	for _, c := range conns {
		if c.GetState() == connectivity.Ready {
			open++
		}
	}
	return open, watches
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

// Health needs no token for a Check (probes), and a connection stays open
// two idle minutes whatever it carried. Callers on 8 hosts, each holding
// its per-host share of connections, must still leave the reconciler room
// for its authenticated calls. Their health Watches, which would hold a
// stream and its headers, are refused without a token.
func TestConnectionsFromEightHostsLeaveRoomForAuthenticatedCalls(t *testing.T) {
	ts := startTokenServer(t, commonFlags{})
	waitServing(t, ts)
	var hosts []string
	for i := 2; i <= 9; i++ {
		hosts = append(hosts, fmt.Sprintf("127.0.0.%d", i))
	}
	open, watches := holdConnections(t, ts, hosts, maxConnsPerHost)
	t.Logf("%d connections open from %d hosts, %d health Watches served", open, len(hosts), watches)
	if watches != 0 {
		t.Errorf("%d health Watches without a token were served over TCP", watches)
	}

	token := newSigner(t, "k").mint(t, ReconcilerIdentity, testAudience)
	if err := echo(t, ts, token, 10*time.Second); err != nil {
		t.Fatalf("the reconciler's call while %d connections are held: %v", open, err)
	}
}

// A health Check needs no token, and gRPC creates its stream (a goroutine,
// its headers) before the request message arrives: a caller that never
// sends it would hold the stream for good. Such calls, whose caller is not
// known yet, have a few places only: the rest are refused at once.
func TestCallsOfUnknownCallersHaveFewPlaces(t *testing.T) {
	ts := startTokenServer(t, commonFlags{})
	waitServing(t, ts)
	const held = 40
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conns := []*grpc.ClientConn{dialFrom(t, ts, "127.0.0.2"), dialFrom(t, ts, "127.0.0.3")}
	ended := make(chan error, held)
	for i := range held {
		s, err := conns[i%2].NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/grpc.health.v1.Health/Check", grpc.WaitForReady(true))
		if err != nil {
			t.Fatal(err)
		}
		go func() { ended <- s.RecvMsg(&healthpb.HealthCheckResponse{}) }()
	}
	want := held - authn.MaxPendingCalls
	for n := range want {
		select {
		case err := <-ended:
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("a held health Check ended with %v, want ResourceExhausted for those beyond the places", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of %d health Checks that never send their request were refused; want %d", n, held, want)
		}
	}
	select {
	case err := <-ended:
		t.Fatalf("%d health Checks refused, want %d (the rest hold the places): %v", want+1, want, err)
	case <-time.After(100 * time.Millisecond):
	}
}
