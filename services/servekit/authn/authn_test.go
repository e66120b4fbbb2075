package authn

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const (
	audience   = "nodeconfig-agent/node-a"
	reconciler = "system:serviceaccount:nodeconfig-system:nodeconfig-reconciler"
)

// mint signs a JWT with the given subject as the token's name, audiences
// and lifetime; the fake API server below judges it by its subject.
func mint(t testing.TB, subject string, lifetime time.Duration, audiences ...string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok, err := jwt.Signed(signer).Claims(jwt.Claims{
		Subject: subject, Audience: audiences, IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(lifetime)),
	}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// fakeReviews answers TokenReviews by the token's subject and counts them;
// the subject "down" makes the API server unreachable.
func fakeReviews(t testing.TB) (*Guard, *atomic.Int64) {
	t.Helper()
	client := fake.NewClientset()
	var calls atomic.Int64
	client.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		calls.Add(1)
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		if len(tr.Spec.Audiences) != 1 || tr.Spec.Audiences[0] != audience {
			t.Errorf("review asked for audiences %v, want [%s]", tr.Spec.Audiences, audience)
		}
		parsed, err := jwt.ParseSigned(tr.Spec.Token, tokenAlgorithms)
		if err != nil {
			t.Errorf("a token that is not a JWT reached the API server: %v", err)
			return true, nil, err
		}
		var c jwt.Claims
		_ = parsed.UnsafeClaimsWithoutVerification(&c)
		out := tr.DeepCopy()
		switch c.Subject {
		case "down":
			return true, nil, errors.New("connection refused")
		case "slow":
			// client-go's words when the review's time runs out in its
			// rate limiter, before a retry after a 429.
			return true, nil, fmt.Errorf("client rate limiter Wait returned an error: %w", context.DeadlineExceeded)
		case "throttled":
			// Its words when the limiter's wait would outlast the time.
			return true, nil, errors.New("client rate limiter Wait returned an error: rate: Wait(n=1) would exceed context deadline")
		case "reconciler", reconciler:
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

// tapCall runs the tap as gRPC does, before the body is read.
func tapCall(g *Guard, network, token, method string) error {
	ctx := over(network, token)
	md, _ := metadata.FromIncomingContext(ctx)
	_, err := g.Tap()(ctx, &tap.Info{FullMethodName: method, Header: md})
	return err
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
		{"tcp, health Watch without token", "tcp", "", "/grpc.health.v1.Health/Watch", codes.Unauthenticated},
		{"unix socket, health Watch without token", "unix", "", "/grpc.health.v1.Health/Watch", codes.OK},
		{"tcp, health Watch of the reconciler", "tcp", mint(t, "reconciler", time.Hour, audience), "/grpc.health.v1.Health/Watch", codes.OK},
		{"tcp, reconciler", "tcp", mint(t, "reconciler", time.Hour, audience), method, codes.OK},
		{"tcp, not a JWT", "tcp", "garbage", method, codes.Unauthenticated},
		{"tcp, refused by the API server", "tcp", mint(t, "forged", time.Hour, audience), method, codes.Unauthenticated},
		{"tcp, another node's audience", "tcp", mint(t, "reconciler", time.Hour, "nodeconfig-agent/node-b"), method, codes.Unauthenticated},
		{"tcp, expired", "tcp", mint(t, "reconciler", -2*time.Minute, audience), method, codes.Unauthenticated},
		{"tcp, audience not confirmed", "tcp", mint(t, "audience-blind", time.Hour, audience), method, codes.Unauthenticated},
		{"tcp, other identity", "tcp", mint(t, "other", time.Hour, audience), method, codes.PermissionDenied},
		{"tcp, API server down", "tcp", mint(t, "down", time.Hour, audience), method, codes.Unavailable},
	} {
		if got := status.Code(g.check(over(tc.network, tc.token), tc.method)); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// What can never pass is refused by the tap, before gRPC reads the body,
// without a TokenReview; what might pass goes on to the review.
func TestTapRefusesFromHeadersAloneWithoutReviews(t *testing.T) {
	g, calls := fakeReviews(t)
	const method = "/nodeconfig.v1.CheckpointService/PutCheckpoint"
	for _, tc := range []struct {
		name, network, token string
		want                 codes.Code
	}{
		{"unix socket", "unix", "", codes.OK},
		{"no token", "tcp", "", codes.Unauthenticated},
		{"not a JWT", "tcp", "garbage", codes.Unauthenticated},
		{"another node's audience", "tcp", mint(t, "reconciler", time.Hour, "nodeconfig-agent/node-b"), codes.Unauthenticated},
		{"expired", "tcp", mint(t, "reconciler", -2*time.Minute, audience), codes.Unauthenticated},
		{"plausible: left to the review", "tcp", mint(t, "forged", time.Hour, audience), codes.OK},
	} {
		if got := status.Code(tapCall(g, tc.network, tc.token, method)); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	// A health Watch would hold its stream and headers: it needs a token.
	if got := status.Code(tapCall(g, "tcp", "", "/grpc.health.v1.Health/Watch")); got != codes.Unauthenticated {
		t.Errorf("a health Watch with no token: %v, want Unauthenticated", got)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("the tap sent %d TokenReviews; it must send none", n)
	}
	// A token the review refused is refused by the tap from then on.
	forged := mint(t, "forged", time.Hour, audience)
	_ = g.check(over("tcp", forged), method)
	if got := status.Code(tapCall(g, "tcp", forged, method)); got != codes.Unauthenticated {
		t.Fatalf("a refused token got %v from the tap, want Unauthenticated", got)
	}
}

// New tokens are reviewed within a budget: a caller minting plausible
// tokens gets ResourceExhausted from the tap, the API server sees at most
// the burst, and a token already accepted still gets through.
func TestNewTokensBeyondTheBudgetAreRefusedBeforeReview(t *testing.T) {
	g, calls := fakeReviews(t)
	good := mint(t, "reconciler", time.Hour, audience)
	if err := g.check(over("tcp", good), "/x/Y"); err != nil {
		t.Fatal(err)
	}
	exhausted := 0
	for range 200 {
		tok := mint(t, "forged", time.Hour, audience)
		err := tapCall(g, "tcp", tok, "/x/Y")
		if status.Code(err) == codes.ResourceExhausted {
			exhausted++
			continue
		}
		_ = g.check(over("tcp", tok), "/x/Y")
	}
	if exhausted == 0 {
		t.Fatal("200 new tokens in a burst all passed the tap")
	}
	if n := calls.Load(); n > 1+reviewBurst+5 {
		t.Fatalf("%d TokenReviews for 200 new tokens; want at most the burst (%d) and what the rate refills", n, reviewBurst)
	}
	if err := tapCall(g, "tcp", good, "/x/Y"); err != nil {
		t.Fatalf("the accepted token was refused during the flood: %v", err)
	}
	// A new token claiming the allowed identity has a budget of its own.
	fresh := mint(t, reconciler, time.Hour, audience)
	if err := tapCall(g, "tcp", fresh, "/x/Y"); err != nil {
		t.Fatalf("a new token of the allowed identity was refused during the flood: %v", err)
	}
	if err := g.check(over("tcp", fresh), "/x/Y"); err != nil {
		t.Fatal(err)
	}
}

// One TokenReview per token while it is cached, and one for many calls
// that arrive together; an unreachable API server is asked again each time.
func TestGuardCoalescesAndCachesReviewsButNotFailuresToReview(t *testing.T) {
	g, calls := fakeReviews(t)
	good, bad := mint(t, "reconciler", time.Hour, audience), mint(t, "forged", time.Hour, audience)
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if err := g.check(over("tcp", good), "/x/Y"); err != nil {
				t.Error(err)
			}
			_ = g.check(over("tcp", bad), "/x/Y")
		})
	}
	wg.Wait()
	if got := calls.Load(); got != 2 {
		t.Fatalf("%d TokenReviews for 100 calls with 2 tokens, want 2", got)
	}
	down := mint(t, "down", time.Hour, audience)
	for range 3 {
		_ = g.check(over("tcp", down), "/x/Y")
	}
	if got := calls.Load(); got != 5 {
		t.Fatalf("%d TokenReviews after 3 calls while the API server was down, want 2+3", got)
	}
}

// A review that runs out of time says so, whatever client-go was doing
// when it did; the caller may retry.
func TestReviewOutOfTimeSaysSo(t *testing.T) {
	g, _ := fakeReviews(t)
	for _, subject := range []string{"slow", "throttled"} {
		err := g.check(over("tcp", mint(t, subject, time.Hour, audience)), "/x/Y")
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "the TokenReview did not complete within 5s") {
			t.Errorf("a review out of time (%s): %v, want Unavailable saying it did not complete within 5s", subject, err)
		}
	}
	err := g.check(over("tcp", mint(t, "down", time.Hour, audience)), "/x/Y")
	if strings.Contains(err.Error(), "did not complete") {
		t.Errorf("a review refused by the network: %v, want no word of time", err)
	}
}

// An accepted token is cached no longer than it is valid.
func TestAcceptanceIsNotCachedPastTheTokensExpiry(t *testing.T) {
	g, calls := fakeReviews(t)
	now := time.Now()
	g.now = func() time.Time { return now }
	short := mint(t, "reconciler", 30*time.Second, audience)
	for _, step := range []struct {
		after   time.Duration
		reviews int64
	}{
		{0, 1},                // reviewed
		{20 * time.Second, 1}, // cached: valid for 10 s more
		{20 * time.Second, 2}, // expired 10 s ago: not cached any more (a minute would still hold it)
	} {
		now = now.Add(step.after)
		_ = g.check(over("tcp", short), "/x/Y")
		if got := calls.Load(); got != step.reviews {
			t.Fatalf("at +%v: %d reviews, want %d", step.after, got, step.reviews)
		}
	}
}

// A nil guard (--auth=none) lets every call through.
func TestNilGuardAllowsAll(t *testing.T) {
	var g *Guard
	if err := g.check(over("tcp", ""), "/x/Y"); err != nil {
		t.Fatal(err)
	}
	if err := tapCall(g, "tcp", "", "/x/Y"); err != nil {
		t.Fatal(err)
	}
}

// A token longer than any ServiceAccount's is refused before it is hashed,
// parsed or reviewed.
func TestAnOversizedTokenIsRefusedUnread(t *testing.T) {
	g, calls := fakeReviews(t)
	huge := mint(t, reconciler, time.Hour, audience) + "." + strings.Repeat("A", MaxTokenBytes)
	err := tapCall(g, "tcp", huge, "/nodeconfig.v1.CheckpointService/GetRecords")
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("tap: %v; want Unauthenticated for its length", err)
	}
	if r, _ := g.review(context.Background(), huge); r.refusal == "" {
		t.Fatal("the review path accepted an oversized token")
	}
	if calls.Load() != 0 {
		t.Fatalf("%d TokenReviews for an oversized token", calls.Load())
	}
}

// tapIn runs the tap on a stream context that ends with cancel, and
// returns the context the stream then has.
func tapIn(t *testing.T, g *Guard, token, method string) (context.Context, context.CancelFunc, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(over("tcp", token))
	t.Cleanup(cancel)
	md, _ := metadata.FromIncomingContext(ctx)
	out, err := g.Tap()(ctx, &tap.Info{FullMethodName: method, Header: md})
	return out, cancel, err
}

// Calls whose caller is not known yet (a health Check, a new token) hold
// one of a few places until their stream ends, their token passes, or the
// time runs out; tokens that claim an allowed identity have places of
// their own.
func TestCallsOfUnknownCallersHoldAFewPlaces(t *testing.T) {
	g, _ := fakeReviews(t)
	const check = "/grpc.health.v1.Health/Check"
	var ends []context.CancelFunc
	for i := range MaxPendingCalls {
		_, end, err := tapIn(t, g, "", check)
		if err != nil {
			t.Fatalf("health Check %d: %v", i, err)
		}
		ends = append(ends, end)
	}
	if _, _, err := tapIn(t, g, "", check); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a health Check beyond the places: %v, want ResourceExhausted", err)
	}
	if _, _, err := tapIn(t, g, mint(t, "forged", time.Hour, audience), "/x/Y"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a new token of another identity beyond the places: %v, want ResourceExhausted", err)
	}
	// The reconciler's new token has places of its own; once it passes,
	// its call no longer holds one, nor is it cut.
	fresh := mint(t, reconciler, time.Hour, audience)
	ctx, _, err := tapIn(t, g, fresh, "/x/Y")
	if err != nil {
		t.Fatalf("the reconciler's new token while the others' places are full: %v", err)
	}
	if err := g.check(ctx, "/x/Y"); err != nil {
		t.Fatal(err)
	}
	if !g.pending.TryAcquire(MaxPendingCalls) {
		t.Fatal("a call whose token passed still holds its place")
	}
	g.pending.Release(MaxPendingCalls)
	// A stream that ends gives its place back.
	ends[0]()
	if err := waitFor(func() bool { _, _, err := tapIn(t, g, "", check); return err == nil }); err != nil {
		t.Fatal("a place given back at a stream's end was not reused")
	}
}

// A call whose caller is still unknown after pendingTimeout is cut.
func TestACallOfAnUnknownCallerIsCutInTime(t *testing.T) {
	g, _ := fakeReviews(t)
	g.pendingTimeout = 50 * time.Millisecond
	ctx, _, err := tapIn(t, g, "", "/grpc.health.v1.Health/Check")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a health Check that never sent its request was not cut")
	}
	passed, _, err := tapIn(t, g, mint(t, "reconciler", time.Hour, audience), "/x/Y")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.check(passed, "/x/Y"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-passed.Done():
		t.Fatal("a call whose token passed was cut")
	case <-time.After(200 * time.Millisecond):
	}
}

func waitFor(cond func() bool) error {
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}
