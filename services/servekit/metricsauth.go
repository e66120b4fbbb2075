package servekit

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc/credentials/tls/certprovider"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
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

// metricsGuard lets a request through only for a user the cluster allows
// to get its path (a nonResourceURLs rule for /metrics in RBAC). /healthz
// stays open for probes.
type metricsGuard struct {
	tokens    authenticationv1client.TokenReviewInterface
	access    authorizationv1client.SubjectAccessReviewInterface
	users     *cache.LRUExpireCache // sha256 of a token -> *authenticationv1.UserInfo, nil if refused
	decisions *cache.LRUExpireCache // user and path -> metricsDecision
}

type metricsDecision struct {
	allowed bool
	reason  string
}

func newMetricsGuard(c MetricsClients) (*metricsGuard, error) {
	if c.Authentication == nil || c.Authorization == nil {
		return nil, fmt.Errorf("--metrics-auth=token needs a Kubernetes client")
	}
	return &metricsGuard{
		tokens:    c.Authentication.TokenReviews(),
		access:    c.Authorization.SubjectAccessReviews(),
		users:     cache.NewLRUExpireCache(metricsCacheSize),
		decisions: cache.NewLRUExpireCache(metricsCacheSize),
	}, nil
}

func (g *metricsGuard) wrap(next http.Handler) http.Handler {
	if g == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, err := g.user(r)
		if err != nil || user == nil {
			http.Error(w, "Unauthorized: send a bearer token of a user allowed to get "+r.URL.Path, http.StatusUnauthorized)
			return
		}
		d, err := g.decide(r.Context(), user, r.URL.Path)
		if err != nil || !d.allowed {
			if err != nil {
				d.reason = err.Error()
			}
			http.Error(w, fmt.Sprintf("Forbidden: %s may not get %s %s", user.Username, r.URL.Path, d.reason), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// user is who the request's bearer token belongs to, nil for no token or a
// token the API server does not accept. An error (the API server did not
// answer) is not remembered.
func (g *metricsGuard) user(r *http.Request) (*authenticationv1.UserInfo, error) {
	scheme, token, _ := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return nil, nil
	}
	key := sha256.Sum256([]byte(token))
	if u, ok := g.users.Get(key); ok {
		return u.(*authenticationv1.UserInfo), nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), metricsReviewTimeout)
	defer cancel()
	review, err := g.tokens.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	var user *authenticationv1.UserInfo
	if review.Status.Authenticated {
		user = &review.Status.User
	}
	g.users.Add(key, user, metricsUserTTL)
	return user, nil
}

// decide asks whether user may get path, as RBAC's nonResourceURLs rules
// say.
func (g *metricsGuard) decide(ctx context.Context, user *authenticationv1.UserInfo, path string) (metricsDecision, error) {
	key := fmt.Sprintf("%s\x00%s\x00%s\x00%v\x00%v", user.UID, user.Username, path, user.Groups, user.Extra)
	if d, ok := g.decisions.Get(key); ok {
		return d.(metricsDecision), nil
	}
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
