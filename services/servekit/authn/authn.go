// Package authn decides who may call a nodeconfig service. Callers on the
// unix socket are trusted: the socket is 0600, so only the node's root (the
// other container of the agent pod) reaches it. Callers over TCP must send
// a Kubernetes ServiceAccount token minted for the service's audience (for
// an agent, one that names its node); the API server's TokenReview says
// whose it is, and only the allowed identities get through. A health
// Check stays open so probes work; a health Watch needs a token like the
// rest, because it holds its stream, its headers and its connection for
// as long as the caller likes.
//
// A call is judged twice. Before its body is read (the tap), from its
// headers alone: no token, a token that is not a JWT for our audience or is
// expired, a token already refused, or a new token beyond the review budget
// is refused there, so garbage costs neither memory nor a TokenReview (a
// token already reviewed is judged by that review alone); a call it lets
// in before its caller is known holds one of a few places until its token
// passes (Prechecks, MaxPendingCalls). Then the interceptor reviews the
// token (one review per token at a time, cached until it expires, at most
// a minute).
package authn

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"
	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
)

// Reviews are cached so that a rollout's dozen calls cost one TokenReview;
// failures briefly, so a fixed token is accepted soon after. New tokens
// are reviewed at most reviewRate per second (reviewBurst at once), with a
// budget of their own for tokens that claim an allowed identity: a caller
// holding many tokens cannot turn the agent into a TokenReview amplifier,
// nor starve the reviews of the reconciler's own token unless it forges
// that very claim.
const (
	rejectedTTL   = 10 * time.Second
	cacheSize     = 1024
	reviewRate    = 5
	reviewBurst   = 10
	reviewTimeout = 5 * time.Second
)

// Calls the tap lets in before their caller is known (a health Check, or a
// new token on its way to review) hold a stream, its headers and a
// goroutine, and a caller that never sends its request holds them for
// good: at most MaxPendingCalls at once (and as many again for tokens that
// claim an allowed identity), each cut after pendingTimeout unless its
// token passes first.
const (
	MaxPendingCalls = 16
	pendingTimeout  = 10 * time.Second
)

// ReviewCacheTTL is how long an accepted review is kept: a token's next
// calls within it cost no TokenReview, and its revocation shows within it.
const ReviewCacheTTL = time.Minute

// tokenAlgorithms are the signatures Kubernetes ServiceAccount tokens use.
var tokenAlgorithms = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.ES256, jose.ES384, jose.ES512, jose.PS256, jose.PS384, jose.PS512, jose.EdDSA}

// Guard checks every call. A nil *Guard lets everything through.
type Guard struct {
	reviews  authenticationv1client.TokenReviewInterface
	audience string
	allowed  []string
	cache    *cache.LRUExpireCache
	inflight singleflight.Group
	// budget is for new tokens claiming an allowed identity, othersBudget
	// for the rest; so are pending and othersPending, the places of calls
	// whose caller is not known yet.
	budget, othersBudget   *rate.Limiter
	pending, othersPending *semaphore.Weighted
	pendingTimeout         time.Duration
	now                    func() time.Time
	// keys, when set, are the cluster's signing keys: a token they do not
	// verify is refused before review.
	keys *KeySet
	// authenticated, when set, hears of every TCP call that passed.
	authenticated func(context.Context)
	denied        *prometheus.CounterVec
	reviewed      prometheus.Counter
}

// New builds a guard that accepts tokens for audience whose user is one of
// allowed (e.g. system:serviceaccount:nodeconfig-system:nodeconfig-reconciler).
func New(reviews authenticationv1client.TokenReviewInterface, audience string, allowed []string, reg prometheus.Registerer) *Guard {
	g := &Guard{
		reviews:        reviews,
		audience:       audience,
		allowed:        allowed,
		budget:         rate.NewLimiter(reviewRate, reviewBurst),
		othersBudget:   rate.NewLimiter(reviewRate, reviewBurst),
		pending:        semaphore.NewWeighted(MaxPendingCalls),
		othersPending:  semaphore.NewWeighted(MaxPendingCalls),
		pendingTimeout: pendingTimeout,
		now:            time.Now,
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeconfig_grpc_calls_refused_total",
			Help: "gRPC calls refused by authentication (Unauthenticated), authorization (PermissionDenied) or the review budget (ResourceExhausted).",
		}, []string{"code"}),
		reviewed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeconfig_token_reviews_total",
			Help: "TokenReviews sent to the API server to verify callers.",
		}),
	}
	g.cache = cache.NewLRUExpireCacheWithClock(cacheSize, clockFunc(func() time.Time { return g.now() }))
	if reg != nil {
		reg.MustRegister(g.denied, g.reviewed)
	}
	return g
}

// WithKeys makes the tap check signatures against the cluster's keys.
func (g *Guard) WithKeys(k *KeySet) *Guard {
	if g != nil {
		g.keys = k
	}
	return g
}

// OnAuthenticated has f called with the context of every call over TCP
// that the guard let through for its token (not a health Check, not the
// socket).
func (g *Guard) OnAuthenticated(f func(context.Context)) *Guard {
	if g != nil {
		g.authenticated = f
	}
	return g
}

type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }

// Tap is the server's InTapHandle: it refuses, from the headers alone,
// calls that could never pass, before gRPC reads their body. It never
// blocks (it runs on the connection's reader).
func (g *Guard) Tap() tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if g == nil || local(ctx) {
			return ctx, nil
		}
		if info.FullMethodName == openMethod {
			// Anyone may call it, so it holds a place as a call whose
			// caller is not known.
			return g.pend(ctx, g.othersPending)
		}
		token := bearer(info.Header)
		if token == "" {
			return ctx, g.refuse(codes.Unauthenticated, "%s needs a bearer token: a ServiceAccount token with audience %q", info.FullMethodName, g.audience)
		}
		if len(token) > MaxTokenBytes {
			return ctx, g.refuse(codes.Unauthenticated, "token refused for audience %q: longer than %d bytes", g.audience, MaxTokenBytes)
		}
		// A reviewed token is judged by its review, cached no longer than
		// the token is valid: reading and verifying it again per call
		// would cost more than the call.
		if v, ok := g.cache.Get(sha256.Sum256([]byte(token))); ok {
			return ctx, g.decide(v.(review), info.FullMethodName)
		}
		claims, refusal := g.claims(token)
		if refusal != "" {
			return ctx, g.refuse(codes.Unauthenticated, "token refused for audience %q: %s", g.audience, refusal)
		}
		budget, places := g.othersBudget, g.othersPending
		if slices.Contains(g.allowed, claims.Subject) {
			budget, places = g.budget, g.pending
		}
		ctx, err := g.pend(ctx, places)
		if err != nil {
			return ctx, err
		}
		if !budget.Allow() {
			abandon(ctx)
			return ctx, g.refuse(codes.ResourceExhausted, "too many new tokens to verify; retry later")
		}
		return ctx, nil
	}
}

// pendingCall is a call holding a place until its caller is known.
type pendingCall struct{ settle, cancel func() }

type pendingKey struct{}

// pend gives a call a place among places, until its stream ends, its token
// passes (settle), or g.pendingTimeout passes, which ends the stream.
func (g *Guard) pend(ctx context.Context, places *semaphore.Weighted) (context.Context, error) {
	if !places.TryAcquire(1) {
		return ctx, g.refuse(codes.ResourceExhausted, "too many calls whose caller is not known yet; retry later")
	}
	ctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(g.pendingTimeout, cancel)
	release := sync.OnceFunc(func() { places.Release(1) })
	p := &pendingCall{settle: func() { timer.Stop(); release() }, cancel: cancel}
	// gRPC cancels a stream's context when the stream ends, however.
	context.AfterFunc(ctx, p.settle)
	return context.WithValue(ctx, pendingKey{}, p), nil
}

// settle gives back the place of the call of ctx, if it holds one.
func settle(ctx context.Context) {
	if p, ok := ctx.Value(pendingKey{}).(*pendingCall); ok {
		p.settle()
	}
}

// abandon ends the context pend made for a call the tap then refuses (gRPC
// does not end it), which gives its place back.
func abandon(ctx context.Context) {
	if p, ok := ctx.Value(pendingKey{}).(*pendingCall); ok {
		p.cancel()
	}
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

// openMethod is the one call that needs no token over TCP: gRPC probes
// cannot send one, and a Check ends at once (a Watch would not).
const openMethod = "/grpc.health.v1.Health/Check"

// trusted: no guard, a health Check, or the node-local unix socket.
func (g *Guard) trusted(ctx context.Context, method string) bool {
	return g == nil || method == openMethod || local(ctx)
}

// local: a call over the node-local unix socket.
func local(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	return ok && p.Addr != nil && p.Addr.Network() == "unix"
}

func (g *Guard) check(ctx context.Context, method string) error {
	if g.trusted(ctx, method) {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	token := bearer(md)
	if token == "" {
		return g.refuse(codes.Unauthenticated, "%s needs a bearer token: a ServiceAccount token with audience %q", method, g.audience)
	}
	r, err := g.review(ctx, token)
	if err != nil {
		// Not the caller's fault and not cached: the next call asks again.
		return status.Errorf(codes.Unavailable, "cannot verify the caller's token: %v", err)
	}
	if err := g.decide(r, method); err != nil {
		return err
	}
	settle(ctx)
	if g.authenticated != nil {
		g.authenticated(ctx)
	}
	return nil
}

// decide turns a review into the call's answer. The refusal does not list
// who would be allowed: a caller learns nothing it could aim for.
func (g *Guard) decide(r review, method string) error {
	if r.refusal != "" {
		return g.refuse(codes.Unauthenticated, "token refused for audience %q: %s", g.audience, r.refusal)
	}
	if !slices.Contains(g.allowed, r.user) {
		return g.refuse(codes.PermissionDenied, "%s may not call %s", r.user, method)
	}
	return nil
}

func (g *Guard) refuse(code codes.Code, format string, args ...any) error {
	g.denied.WithLabelValues(code.String()).Inc()
	return status.Errorf(code, format, args...)
}

// MaxTokenBytes is the longest bearer token looked at: a Kubernetes
// ServiceAccount token with its claims is about a kilobyte.
const MaxTokenBytes = 4 << 10

func bearer(md metadata.MD) string {
	for _, v := range md.Get("authorization") {
		if t, ok := strings.CutPrefix(v, "Bearer "); ok && t != "" {
			return t
		}
	}
	return ""
}

// claims reads a token's claims and says why it can never pass here.
func (g *Guard) claims(token string) (jwt.Claims, string) {
	return Prechecks{Audience: g.audience, Keys: g.keys, Now: g.now}.Check(token)
}

// review asks the API server about a token, once per token at a time, and
// caches the answer: an acceptance until the token expires (at most a
// minute), a refusal briefly.
func (g *Guard) review(ctx context.Context, token string) (review, error) {
	key := sha256.Sum256([]byte(token))
	if v, ok := g.cache.Get(key); ok {
		return v.(review), nil
	}
	claims, refusal := g.claims(token)
	if refusal != "" {
		return review{refusal: refusal}, nil
	}
	v, err, _ := g.inflight.Do(string(key[:]), func() (any, error) {
		if v, ok := g.cache.Get(key); ok {
			// Reviewed by a call that finished since our look above.
			return v, nil
		}
		// Detached from the first caller: the others wait on this review.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reviewTimeout)
		defer cancel()
		g.reviewed.Inc()
		tr, err := g.reviews.Create(rctx, &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{g.audience}},
		}, metav1.CreateOptions{})
		if outOfTime(err) {
			// client-go names where the time ran out (its rate limiter
			// before a retry after a 429, say), not that the review did.
			return review{}, fmt.Errorf("the TokenReview did not complete within %s: the API server is slow or throttling it (%w)", reviewTimeout, err)
		}
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
		ttl := rejectedTTL
		if r.refusal == "" {
			ttl = ReviewCacheTTL
			if claims.Expiry != nil {
				ttl = min(ttl, claims.Expiry.Time().Sub(g.now()))
			}
		}
		if ttl > 0 {
			g.cache.Add(key, r, ttl)
		}
		return r, nil
	})
	if err != nil {
		return review{}, err
	}
	return v.(review), nil
}

// outOfTime says whether err is a review's deadline passing: the context
// ran out, or the client's rate limiter saw that its wait would outlast it
// (golang.org/x/time/rate says so in words, wrapping nothing).
func outOfTime(err error) bool {
	return err != nil && (errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "would exceed context deadline"))
}
