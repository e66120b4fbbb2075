package grpcspy

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Calls pass through both ways, a server stream and an error status too,
// and each is noted once, by method, in order.
func TestSpyForwardsAndNotesEachCall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "upstream.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("up", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	spy := Start(t, "unix://"+path)
	conn, err := grpc.NewClient(spy.Target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before := time.Now()
	resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "up"})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Check through the spy: %v, %v", resp, err)
	}
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "absent"}); status.Code(err) != codes.NotFound {
		t.Fatalf("Check of an unknown service through the spy: %v, want the upstream's NotFound", err)
	}
	watch, err := client.Watch(ctx, &healthpb.HealthCheckRequest{Service: "up"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := watch.Recv(); err != nil || got.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Watch through the spy: %v, %v", got, err)
	}
	checks := spy.Calls("/grpc.health.v1.Health/Check")
	if len(checks) != 2 || checks[0].At.Before(before) || checks[1].At.Before(checks[0].At) {
		t.Fatalf("noted Checks %v, want 2 in order after %v", checks, before)
	}
	if all := spy.Calls(""); len(all) != 3 || all[2].Method != "/grpc.health.v1.Health/Watch" {
		t.Fatalf("noted %v, want the two Checks and the Watch", all)
	}
}
