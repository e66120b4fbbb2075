package servekit

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/grpc/credentials/tls/certprovider"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
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

// metricsGuard lets a request through only for a user the cluster allows
// to get its path (a nonResourceURLs rule for /metrics in RBAC). /healthz
// stays open for probes.
type metricsGuard struct {
	authn authenticator.Request
	authz authorizer.Authorizer
}

func newMetricsGuard(c MetricsClients) (*metricsGuard, error) {
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		TokenAccessReviewClient:  c.Authentication,
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      &backoff,
		CacheTTL:                 time.Minute,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("--metrics-auth=token: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: c.Authorization,
		AllowCacheTTL:             time.Minute,
		DenyCacheTTL:              10 * time.Second,
		WebhookRetryBackoff:       &backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("--metrics-auth=token: %w", err)
	}
	return &metricsGuard{authn: authn, authz: authz}, nil
}

func (g *metricsGuard) wrap(next http.Handler) http.Handler {
	if g == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, ok, err := g.authn.AuthenticateRequest(r)
		if err != nil || !ok {
			http.Error(w, "Unauthorized: send a bearer token of a user allowed to get "+r.URL.Path, http.StatusUnauthorized)
			return
		}
		decision, reason, err := g.authz.Authorize(r.Context(), authorizer.AttributesRecord{
			User: resp.User, Verb: "get", Path: r.URL.Path, ResourceRequest: false,
		})
		if err != nil || decision != authorizer.DecisionAllow {
			http.Error(w, fmt.Sprintf("Forbidden: %s may not get %s %s", resp.User.GetName(), r.URL.Path, reason), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
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
