package servekit

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/credentials/tls/certprovider"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"

	"nodeconfig.io/services/servekit/authn"
)

// MetricsClients are what --metrics-auth=token asks the API server with:
// who a bearer token is (TokenReview) and whether that user may get the
// path (SubjectAccessReview), as the kubelet guards its own /metrics.
type MetricsClients struct {
	Authentication authenticationv1client.AuthenticationV1Interface
	Authorization  authorizationv1client.AuthorizationV1Interface
}

// How long answers are kept: a scraper every few seconds costs a review a
// minute, and a revoked RBAC grant or a refused token is asked again soon.
// The reviews are two plain API calls: k8s.io/apiserver's delegating
// authenticator and authorizer do the same, but link its CEL and tracing
// code into every binary, about 14 MiB resident in each process.
const (
	metricsUserTTL       = time.Minute
	metricsAllowTTL      = time.Minute
	metricsDenyTTL       = 10 * time.Second
	metricsCacheSize     = 1024
	metricsReviewTimeout = 10 * time.Second
)

// The metrics port's review budget, its own and not the gRPC tap's: a
// scraper costs two reviews a minute, and a flood of tokens that pass the
// prechecks (genuine ServiceAccount tokens, each of which the flooder had
// to ask the API server for) costs at most metricsReviewRate a second,
// metricsReviewsInFlight at a time. Beyond it a request is answered 429
// at once rather than queued.
const (
	metricsReviewRate      = 1
	metricsReviewBurst     = 10
	metricsReviewsInFlight = 2
)

// metricsGuard lets a request through only for a user the cluster allows
// to get its path (a nonResourceURLs rule for /metrics in RBAC). /healthz
// stays open for probes. A token that could never pass (authn.Prechecks:
// not a JWT, expired, not signed by the cluster's ServiceAccount keys) is
// refused without a review.
type metricsGuard struct {
	tokens    authenticationv1client.TokenReviewInterface
	access    authorizationv1client.SubjectAccessReviewInterface
	pre       authn.Prechecks
	budget    *rate.Limiter
	inflight  *semaphore.Weighted
	users     *cache.LRUExpireCache // sha256 of a token -> *authenticationv1.UserInfo, nil if refused
	decisions *cache.LRUExpireCache // user and path -> metricsDecision
	// allowed hears of every request let through (its connection is
	// then a proven one).
	allowed func(*http.Request)
	refused *prometheus.CounterVec
	reviews *prometheus.CounterVec
}

type metricsDecision struct {
	allowed bool
	reason  string
}

// errMetricsBusy is a review the budget has no room for.
var errMetricsBusy = errors.New("too many new tokens to verify; retry later")

func newMetricsGuard(c MetricsClients, keys *authn.KeySet, reg prometheus.Registerer, allowed func(*http.Request)) (*metricsGuard, error) {
	if c.Authentication == nil || c.Authorization == nil {
		return nil, fmt.Errorf("--metrics-auth=token needs a Kubernetes client")
	}
	g := &metricsGuard{
		tokens:    c.Authentication.TokenReviews(),
		access:    c.Authorization.SubjectAccessReviews(),
		pre:       authn.Prechecks{Keys: keys},
		budget:    rate.NewLimiter(metricsReviewRate, metricsReviewBurst),
		inflight:  semaphore.NewWeighted(metricsReviewsInFlight),
		users:     cache.NewLRUExpireCache(metricsCacheSize),
		decisions: cache.NewLRUExpireCache(metricsCacheSize),
		allowed:   allowed,
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeconfig_metrics_requests_refused_total",
			Help: "Requests for /metrics or /debug/pprof refused, by HTTP status: 401 (no token, or one that is not a ServiceAccount's), 403 (RBAC), 429 (the review budget).",
		}, []string{"code"}),
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeconfig_metrics_reviews_total",
			Help: "TokenReviews and SubjectAccessReviews sent to the API server to guard /metrics and /debug/pprof.",
		}, []string{"kind"}),
	}
	if reg != nil {
		reg.MustRegister(g.refused, g.reviews)
	}
	return g, nil
}

func (g *metricsGuard) wrap(next http.Handler) http.Handler {
	if g == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, refusal, err := g.user(r)
		if errors.Is(err, errMetricsBusy) {
			g.refuse(w, http.StatusTooManyRequests, err.Error())
			return
		}
		if err != nil || user == nil {
			if err != nil {
				refusal = "cannot verify the token: " + err.Error()
			}
			g.refuse(w, http.StatusUnauthorized, "Unauthorized: send a ServiceAccount's bearer token of a user allowed to get "+r.URL.Path+refusal)
			return
		}
		d, err := g.decide(r.Context(), user, r.URL.Path)
		if errors.Is(err, errMetricsBusy) {
			g.refuse(w, http.StatusTooManyRequests, err.Error())
			return
		}
		if err != nil || !d.allowed {
			if err != nil {
				d.reason = err.Error()
			}
			g.refuse(w, http.StatusForbidden, fmt.Sprintf("Forbidden: %s may not get %s %s", user.Username, r.URL.Path, d.reason))
			return
		}
		if g.allowed != nil {
			g.allowed(r)
		}
		next.ServeHTTP(w, r)
	})
}

func (g *metricsGuard) refuse(w http.ResponseWriter, code int, msg string) {
	g.refused.WithLabelValues(strconv.Itoa(code)).Inc()
	if code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	http.Error(w, msg, code)
}

// spend takes a review from the budget, or says there is no room.
func (g *metricsGuard) spend(kind string) (release func(), err error) {
	if !g.inflight.TryAcquire(1) {
		return nil, errMetricsBusy
	}
	// Only a review that is sent spends the rate.
	if !g.budget.Allow() {
		g.inflight.Release(1)
		return nil, errMetricsBusy
	}
	g.reviews.WithLabelValues(kind).Inc()
	return func() { g.inflight.Release(1) }, nil
}

// user is who the request's bearer token belongs to, nil for no token or a
// token that cannot pass (refusal says why) or that the API server does not
// accept. An error (no budget, the API server did not answer) is not
// remembered.
func (g *metricsGuard) user(r *http.Request) (user *authenticationv1.UserInfo, refusal string, err error) {
	scheme, token, _ := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return nil, "", nil
	}
	if _, refusal := g.pre.Check(token); refusal != "" {
		return nil, ": the token is " + refusal, nil
	}
	key := sha256.Sum256([]byte(token))
	if u, ok := g.users.Get(key); ok {
		return u.(*authenticationv1.UserInfo), "", nil
	}
	release, err := g.spend("TokenReview")
	if err != nil {
		return nil, "", err
	}
	defer release()
	ctx, cancel := context.WithTimeout(r.Context(), metricsReviewTimeout)
	defer cancel()
	review, err := g.tokens.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return nil, "", err
	}
	if review.Status.Authenticated {
		user = &review.Status.User
	}
	g.users.Add(key, user, metricsUserTTL)
	return user, "", nil
}

// decide asks whether user may get path, as RBAC's nonResourceURLs rules
// say.
func (g *metricsGuard) decide(ctx context.Context, user *authenticationv1.UserInfo, path string) (metricsDecision, error) {
	key := fmt.Sprintf("%s\x00%s\x00%s\x00%v\x00%v", user.UID, user.Username, path, user.Groups, user.Extra)
	if d, ok := g.decisions.Get(key); ok {
		return d.(metricsDecision), nil
	}
	release, err := g.spend("SubjectAccessReview")
	if err != nil {
		return metricsDecision{}, err
	}
	defer release()
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	ctx, cancel := context.WithTimeout(ctx, metricsReviewTimeout)
	defer cancel()
	review, err := g.access.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: "get"},
	}}, metav1.CreateOptions{})
	if err != nil {
		return metricsDecision{}, err
	}
	d := metricsDecision{allowed: review.Status.Allowed && !review.Status.Denied, reason: review.Status.Reason}
	ttl := metricsDenyTTL
	if d.allowed {
		ttl = metricsAllowTTL
	}
	g.decisions.Add(key, d, ttl)
	return d, nil
}

// tlsFrom serves the certificate a provider keeps fresh.
func tlsFrom(certs certprovider.Provider, protos ...string) *tls.Config {
	return &tls.Config{
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			km, err := certs.KeyMaterial(hello.Context())
			if err != nil {
				return nil, err
			}
			return &km.Certs[0], nil
		},
		MinVersion: tls.VersionTLS13,
		NextProtos: protos,
	}
}
