package authn

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const (
	audience   = "nodeconfig-agent"
	reconciler = "system:serviceaccount:nodeconfig-system:nodeconfig-reconciler"
)

// fakeReviews answers TokenReviews from a table and counts them; the token
// "down" makes the API server unreachable.
func fakeReviews(t *testing.T) (*Guard, *atomic.Int64) {
	t.Helper()
	client := fake.NewSimpleClientset()
	var calls atomic.Int64
	client.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		calls.Add(1)
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		if len(tr.Spec.Audiences) != 1 || tr.Spec.Audiences[0] != audience {
			t.Errorf("review asked for audiences %v, want [%s]", tr.Spec.Audiences, audience)
		}
		out := tr.DeepCopy()
		switch tr.Spec.Token {
		case "down":
			return true, nil, errors.New("connection refused")
		case "reconciler":
			out.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{audience}, User: authenticationv1.UserInfo{Username: reconciler}}
		case "other":
			out.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{audience}, User: authenticationv1.UserInfo{Username: "system:serviceaccount:default:other"}}
		case "audience-blind":
			// An authenticator that ignores audiences says yes without them.
			out.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: reconciler}}
		default:
			out.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, out, nil
	})
	return New(client.AuthenticationV1().TokenReviews(), audience, []string{reconciler}, nil), &calls
}

func over(network, token string) context.Context {
	var addr net.Addr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	if network == "unix" {
		addr = &net.UnixAddr{Net: "unix", Name: "/run/x.sock"}
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: addr})
	if token != "" {
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+token))
	}
	return ctx
}

func TestGuardDecidesByTransportTokenAndIdentity(t *testing.T) {
	g, _ := fakeReviews(t)
	const method = "/nodeconfig.v1.CheckpointService/Activate"
	for _, tc := range []struct {
		name, network, token, method string
		want                         codes.Code
	}{
		{"unix socket, no token", "unix", "", method, codes.OK},
		{"tcp, no token", "tcp", "", method, codes.Unauthenticated},
		{"tcp, health without token", "tcp", "", "/grpc.health.v1.Health/Check", codes.OK},
		{"tcp, reconciler", "tcp", "reconciler", method, codes.OK},
		{"tcp, bad token", "tcp", "garbage", method, codes.Unauthenticated},
		{"tcp, audience not confirmed", "tcp", "audience-blind", method, codes.Unauthenticated},
		{"tcp, other identity", "tcp", "other", method, codes.PermissionDenied},
		{"tcp, API server down", "tcp", "down", method, codes.Unavailable},
	} {
		if got := status.Code(g.check(over(tc.network, tc.token), tc.method)); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// One TokenReview per token while it is cached, so a rollout's calls do not
// load the API server; an unreachable API server is asked again each time.
func TestGuardCachesReviewsButNotFailuresToReview(t *testing.T) {
	g, calls := fakeReviews(t)
	for range 5 {
		if err := g.check(over("tcp", "reconciler"), "/x/Y"); err != nil {
			t.Fatal(err)
		}
		_ = g.check(over("tcp", "garbage"), "/x/Y")
	}
	if got := calls.Load(); got != 2 {
		t.Fatalf("%d TokenReviews for 10 calls with 2 tokens, want 2", got)
	}
	for range 3 {
		_ = g.check(over("tcp", "down"), "/x/Y")
	}
	if got := calls.Load(); got != 5 {
		t.Fatalf("%d TokenReviews after 3 calls while the API server was down, want 2+3", got)
	}
}

// A nil guard (--auth=none) lets every call through.
func TestNilGuardAllowsAll(t *testing.T) {
	var g *Guard
	if err := g.check(over("tcp", ""), "/x/Y"); err != nil {
		t.Fatal(err)
	}
}
