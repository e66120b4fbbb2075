// Package authn decides who may call a nodeconfig service. Callers on the
// unix socket are trusted: the socket is 0600, so only the node's root (the
// other container of the agent pod) reaches it. Callers over TCP must send
// a Kubernetes ServiceAccount token minted for the service's audience; the
// API server's TokenReview says whose it is, and only the allowed identities
// get through. gRPC health stays open so the kubelet's probes work.
package authn

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
)

// Reviews are cached so that a rollout's dozen calls cost one TokenReview;
// failures briefly, so a fixed token is accepted soon after.
const (
	acceptedTTL = time.Minute
	rejectedTTL = 10 * time.Second
	cacheSize   = 1024
)

// Guard checks every call. A nil *Guard lets everything through.
type Guard struct {
	reviews  authenticationv1client.TokenReviewInterface
	audience string
	allowed  []string
	cache    *cache.LRUExpireCache
	denied   *prometheus.CounterVec
}

// New builds a guard that accepts tokens for audience whose user is one of
// allowed (e.g. system:serviceaccount:nodeconfig-system:nodeconfig-reconciler).
func New(reviews authenticationv1client.TokenReviewInterface, audience string, allowed []string, reg prometheus.Registerer) *Guard {
	g := &Guard{
		reviews:  reviews,
		audience: audience,
		allowed:  allowed,
		cache:    cache.NewLRUExpireCache(cacheSize),
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeconfig_grpc_calls_refused_total",
			Help: "gRPC calls refused by authentication (Unauthenticated) or authorization (PermissionDenied).",
		}, []string{"code"}),
	}
	if reg != nil {
		reg.MustRegister(g.denied)
	}
	return g
}

// Unary is the unary server interceptor.
func (g *Guard) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := g.check(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// Stream is the stream server interceptor.
func (g *Guard) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := g.check(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

type review struct {
	user    string
	refusal string // empty when the token is good for our audience
}

func (g *Guard) check(ctx context.Context, method string) error {
	if g == nil || strings.HasPrefix(method, "/grpc.health.v1.Health/") {
		return nil
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil && p.Addr.Network() == "unix" {
		return nil
	}
	token := bearer(ctx)
	if token == "" {
		return g.refuse(codes.Unauthenticated, "%s needs a bearer token: a ServiceAccount token with audience %q", method, g.audience)
	}
	r, err := g.review(ctx, token)
	if err != nil {
		// Not the caller's fault and not cached: the next call asks again.
		return status.Errorf(codes.Unavailable, "cannot verify the caller's token: %v", err)
	}
	if r.refusal != "" {
		return g.refuse(codes.Unauthenticated, "token refused for audience %q: %s", g.audience, r.refusal)
	}
	if !slices.Contains(g.allowed, r.user) {
		return g.refuse(codes.PermissionDenied, "%s may not call %s (allowed: %s)", r.user, method, strings.Join(g.allowed, ", "))
	}
	return nil
}

func (g *Guard) refuse(code codes.Code, format string, args ...any) error {
	g.denied.WithLabelValues(code.String()).Inc()
	return status.Errorf(code, format, args...)
}

func bearer(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if t, ok := strings.CutPrefix(v, "Bearer "); ok && t != "" {
			return t
		}
	}
	return ""
}

func (g *Guard) review(ctx context.Context, token string) (review, error) {
	key := sha256.Sum256([]byte(token))
	if v, ok := g.cache.Get(key); ok {
		return v.(review), nil
	}
	tr, err := g.reviews.Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{g.audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return review{}, err
	}
	var r review
	switch {
	case !tr.Status.Authenticated:
		r.refusal = tr.Status.Error
		if r.refusal == "" {
			r.refusal = "not authenticated"
		}
	case !slices.Contains(tr.Status.Audiences, g.audience):
		// An authenticator that ignores audiences must not let a token
		// minted for something else through.
		r.refusal = fmt.Sprintf("token audiences %v do not include it", tr.Status.Audiences)
	default:
		r.user = tr.Status.User.Username
	}
	ttl := acceptedTTL
	if r.refusal != "" {
		ttl = rejectedTTL
	}
	g.cache.Add(key, r, ttl)
	return r, nil
}
