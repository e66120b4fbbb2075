// Package grpcspy stands between a gRPC client and its server and notes
// when each call arrived, by method: what a client did, as the other side
// saw it, without asking the client. It forwards every call, whatever its
// service, as raw bytes.
package grpcspy

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
)

// Call is one call the spy forwarded.
type Call struct {
	Method string // e.g. /nodeconfig.v1.CheckpointService/GetRecords
	At     time.Time
}

// Spy is the proxy; Target is what its clients dial.
type Spy struct {
	Target string
	mu     sync.Mutex
	calls  []Call
}

// Start listens on a unix socket in a directory of its own and forwards to
// upstream (a gRPC target); the test's cleanup stops it.
func Start(t testing.TB, upstream string) *Spy {
	t.Helper()
	dir, err := os.MkdirTemp("", "grpcspy")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "spy.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	// The upstream may restart: reconnect within moments, as a client of
	// the upstream itself would (sim.Dial), not after gRPC's default
	// backoff of up to two minutes.
	conn, err := grpc.NewClient(upstream, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(raw{})),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		t.Fatal(err)
	}
	s := &Spy{Target: "unix://" + path}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(raw{}), grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		return s.forward(stream, conn)
	}))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Stop()
		_ = conn.Close()
		_ = os.RemoveAll(dir)
	})
	return s
}

// Calls returns the calls so far of method (every call when "").
func (s *Spy) Calls(method string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Call
	for _, c := range s.calls {
		if method == "" || c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// forward relays one call, both ways, until either side ends it.
func (s *Spy) forward(in grpc.ServerStream, upstream *grpc.ClientConn) error {
	method, _ := grpc.MethodFromServerStream(in)
	s.mu.Lock()
	s.calls = append(s.calls, Call{Method: method, At: time.Now()})
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(in.Context())
	defer cancel()
	md, _ := metadata.FromIncomingContext(ctx)
	out, err := upstream.NewStream(metadata.NewOutgoingContext(ctx, md), &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		return err
	}
	sent := make(chan error, 1)
	go func() {
		for {
			var m frame
			if err := in.RecvMsg(&m); err != nil {
				if errors.Is(err, io.EOF) {
					err = out.CloseSend()
				}
				sent <- err
				return
			}
			if err := out.SendMsg(&m); err != nil {
				sent <- err
				return
			}
		}
	}()
	header, headerErr := out.Header()
	if headerErr == nil {
		_ = in.SendHeader(header)
	}
	for {
		var m frame
		if err := out.RecvMsg(&m); err != nil {
			in.SetTrailer(out.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err // the upstream's status, as it came
		}
		if err := in.SendMsg(&m); err != nil {
			return err
		}
	}
}

// frame is one message's bytes.
type frame struct{ b []byte }

// raw passes messages through as bytes.
type raw struct{}

func (raw) Name() string { return "proto" }

func (raw) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(*frame).b)}, nil
}

func (raw) Unmarshal(data mem.BufferSlice, v any) error {
	v.(*frame).b = data.Materialize()
	return nil
}
