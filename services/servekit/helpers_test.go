package servekit

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/emptypb"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	certutil "k8s.io/client-go/util/cert"
)

// testAudience is the audience the test servers accept tokens for.
const testAudience = "nodeconfig-agent/node-a"

// testCert writes a serving certificate for 127.0.0.1 (and servekit-test)
// and its key, signed by a CA of its own, and returns a pool that trusts it.
func testCert(t testing.TB) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("servekit-test", []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	if !pool.AppendCertsFromPEM(certPEM) {
		t.Fatal("no certificate to trust")
	}
	return certFile, keyFile, pool
}

// signer mints JWTs for testAudience with one key; published is that key
// as the API server's /openid/v1/jwks serves it.
type signer struct {
	key *ecdsa.PrivateKey
	id  string
}

func newSigner(t testing.TB, id string) signer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return signer{key, id}
}

func (s signer) mint(t testing.TB, subject string, audiences ...string) string {
	t.Helper()
	js, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: s.key}, (&jose.SignerOptions{}).WithHeader("kid", s.id))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok, err := jwt.Signed(js).Claims(jwt.Claims{Subject: subject, Audience: audiences,
		IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(time.Hour))}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (s signer) published(context.Context) ([]byte, error) {
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: s.key.Public(), KeyID: s.id, Algorithm: string(jose.ES256), Use: "sig"}}}
	return json.Marshal(set)
}

// fakeTokenReviews authenticates a token by its subject (any subject but
// "forged"), as the API server would for a token it signed, and counts
// the reviews.
func fakeTokenReviews(t testing.TB, reviews *atomic.Int64) *fake.Clientset {
	t.Helper()
	c := fake.NewClientset()
	c.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		reviews.Add(1)
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		parsed, err := jwt.ParseSigned(tr.Spec.Token, []jose.SignatureAlgorithm{jose.ES256})
		var claims jwt.Claims
		if err == nil {
			err = parsed.UnsafeClaimsWithoutVerification(&claims)
		}
		if err != nil || claims.Subject == "forged" {
			tr.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
			return true, tr, nil
		}
		tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: tr.Spec.Audiences,
			User: authenticationv1.UserInfo{Username: claims.Subject, Groups: []string{"system:serviceaccounts"}}}
		return true, tr, nil
	})
	return c
}

// echoDesc is a service with one unary method that needs a token over TCP,
// as every nodeconfig RPC but health does.
var echoDesc = grpc.ServiceDesc{
	ServiceName: "servekit.test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Echo", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(emptypb.Empty)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, req any) (any, error) { return req, nil }
		if ic == nil {
			return h(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/servekit.test.Echo/Echo"}, h)
	}}},
}

// tokenServer serves echoDesc with --auth=token over TLS on a loopback
// port, reviewing tokens with a counting fake API server, until the test
// ends. It returns the gRPC address and the client TLS that trusts it.
type tokenServer struct {
	addr, metrics string
	tls           credentials.TransportCredentials
	pool          *x509.CertPool
	reviews       atomic.Int64
}

func startTokenServer(t testing.TB, flags commonFlags) *tokenServer {
	t.Helper()
	certFile, keyFile, pool := testCert(t)
	ts := &tokenServer{pool: pool}
	c := fakeTokenReviews(t, &ts.reviews)
	ts.addr = freeLoopbackAddr(t)
	flags.Listen, flags.Auth, flags.TLSCertFile, flags.TLSKeyFile = ts.addr, "token", certFile, keyFile
	flags.Audience, flags.Allowed = testAudience, []string{ReconcilerIdentity}
	flags.TokenReviews = c.AuthenticationV1().TokenReviews()
	if flags.MetricsAuth == "" {
		flags.MetricsAuth = "none"
	}
	s, err := newServer(flags, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s.GRPC.RegisterService(&echoDesc, struct{}{})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, "servekit.test.Echo") }()
	t.Cleanup(func() { cancel(); <-served })
	ts.tls = credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "servekit-test"})
	return ts
}
