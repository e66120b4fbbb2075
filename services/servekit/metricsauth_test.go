package servekit

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/flowcontrol"

	"nodeconfig.io/services/servekit/authn"
)

// fakeReviews answers TokenReviews by the token's subject (users: subject
// -> user; absent: not authenticated) and SubjectAccessReviews from
// allowed (user -> may get /metrics), counting the calls; fail makes both
// return an error, and hold, while set, keeps every review waiting on it.
type fakeReviews struct {
	users         map[string]string
	allowed       map[string]bool
	fail          atomic.Bool
	hold          chan struct{}
	tokenReviews  atomic.Int64
	accessReviews atomic.Int64
}

func (f *fakeReviews) clients(t testing.TB) MetricsClients {
	t.Helper()
	c := fake.NewClientset()
	wait := func() {
		if f.hold != nil {
			<-f.hold
		}
	}
	c.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.tokenReviews.Add(1)
		wait()
		if f.fail.Load() {
			return true, nil, errors.New("API server unreachable")
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		var claims jwt.Claims
		parsed, err := jwt.ParseSigned(tr.Spec.Token, []jose.SignatureAlgorithm{jose.ES256})
		if err != nil || parsed.UnsafeClaimsWithoutVerification(&claims) != nil {
			t.Errorf("a token that is not a JWT reached the API server: %.40q", tr.Spec.Token)
			return true, tr, nil
		}
		if user, ok := f.users[claims.Subject]; ok {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: user, Groups: []string{"g"}}}
		}
		return true, tr, nil
	})
	c.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.accessReviews.Add(1)
		wait()
		if f.fail.Load() {
			return true, nil, errors.New("API server unreachable")
		}
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		na := sar.Spec.NonResourceAttributes
		if na == nil || na.Verb != "get" || sar.Spec.Groups[0] != "g" {
			t.Errorf("SubjectAccessReview asks %+v", sar.Spec)
		}
		sar.Status.Allowed = f.allowed[sar.Spec.User] && na.Path == "/metrics"
		if !sar.Status.Allowed {
			sar.Status.Reason = "no RBAC rule"
		}
		return true, sar, nil
	})
	return MetricsClients{Authentication: c.AuthenticationV1(), Authorization: c.AuthorizationV1()}
}

func (f *fakeReviews) guard(t testing.TB, keys *authn.KeySet) *metricsGuard {
	t.Helper()
	g, err := newMetricsGuard(f.clients(t), keys, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// readKeys reads the cluster's keys (s's) in the background until the test
// ends, and returns once they are known: a token of another key is then
// refused.
func readKeys(t testing.TB, s signer) *authn.KeySet {
	t.Helper()
	keys := authn.NewKeySet(s.published, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go keys.Run(ctx)
	other := newSigner(t, "other").mint(t, "x")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, refusal := (authn.Prechecks{Keys: keys}).Check(other); refusal != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the keys were not read")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return keys
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})

func get(h http.Handler, path, authorization string) int {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	if authorization != "" {
		r.Header.Set("Authorization", authorization)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

func TestMetricsGuard(t *testing.T) {
	cluster := newSigner(t, "cluster")
	f := &fakeReviews{users: map[string]string{"reader": "reader", "nobody": "nobody"}, allowed: map[string]bool{"reader": true}}
	h := f.guard(t, readKeys(t, cluster)).wrap(okHandler)
	reader, nobody, unknown := cluster.mint(t, "reader"), cluster.mint(t, "nobody"), cluster.mint(t, "unknown")

	for _, c := range []struct {
		name, path, authorization string
		want                      int
	}{
		{"no token", "/metrics", "", http.StatusUnauthorized},
		{"not a bearer token", "/metrics", "Basic cmVhZGVy", http.StatusUnauthorized},
		{"a token the API server does not know", "/metrics", "Bearer " + unknown, http.StatusUnauthorized},
		{"a user RBAC does not allow", "/metrics", "Bearer " + nobody, http.StatusForbidden},
		{"a user RBAC allows", "/metrics", "Bearer " + reader, http.StatusOK},
		{"the scheme in lower case", "/metrics", "bearer " + reader, http.StatusOK},
		{"a path the user may not get", "/debug/pprof/", "Bearer " + reader, http.StatusForbidden},
	} {
		if got := get(h, c.path, c.authorization); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
	// Asked again, every answer comes from the cache.
	tokens, access := f.tokenReviews.Load(), f.accessReviews.Load()
	for range 3 {
		get(h, "/metrics", "Bearer "+reader)
		get(h, "/metrics", "Bearer "+nobody)
		get(h, "/metrics", "Bearer "+unknown)
	}
	if n, m := f.tokenReviews.Load()-tokens, f.accessReviews.Load()-access; n != 0 || m != 0 {
		t.Errorf("repeated requests made %d token and %d access reviews, want none", n, m)
	}
}

func TestMetricsGuardDoesNotRememberAnAPIServerError(t *testing.T) {
	f := &fakeReviews{users: map[string]string{"reader": "reader"}, allowed: map[string]bool{"reader": true}}
	f.fail.Store(true)
	h := f.guard(t, nil).wrap(okHandler)
	reader := "Bearer " + newSigner(t, "k").mint(t, "reader")
	if got := get(h, "/metrics", reader); got != http.StatusUnauthorized {
		t.Fatalf("API server down: %d, want 401", got)
	}
	f.fail.Store(false)
	if got := get(h, "/metrics", reader); got != http.StatusOK {
		t.Fatalf("API server back: %d, want 200", got)
	}
}

// 10,000 junk bearer tokens at the metrics port (not JWTs, expired, signed
// by a key that is not the cluster's, or claiming the cluster's key with
// another's signature) are refused with no review at all, and a reader
// with a genuine token is served throughout.
func TestJunkTokensAtTheMetricsPortCostNoReview(t *testing.T) {
	cluster, f, h, reader := readerServed(t)
	before := f.tokenReviews.Load() + f.accessReviews.Load()
	stranger, impostor := newSigner(t, "stranger"), newSigner(t, "cluster")
	expired := func() string {
		js, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: cluster.key}, (&jose.SignerOptions{}).WithHeader("kid", cluster.id))
		tok, _ := jwt.Signed(js).Claims(jwt.Claims{Subject: "reader", Expiry: jwt.NewNumericDate(time.Now().Add(-time.Hour))}).Serialize()
		return tok
	}()
	junk := []string{expired}
	for i := range 50 {
		junk = append(junk, stranger.mint(t, "reader-"+strconv.Itoa(i)), impostor.mint(t, "reader-"+strconv.Itoa(i)))
	}
	const flood = 10000
	codes := map[int]int{}
	for i := range flood {
		tok := "junk-" + strconv.Itoa(i)
		if i%2 == 1 {
			tok = junk[i%len(junk)]
		}
		codes[get(h, "/metrics", "Bearer "+tok)]++
		if i%1000 == 0 {
			if got := get(h, "/metrics", reader); got != http.StatusOK {
				t.Fatalf("the reader during the flood: %d", got)
			}
		}
	}
	if codes[http.StatusUnauthorized] != flood {
		t.Errorf("%d junk tokens answered %v, want all 401", flood, codes)
	}
	if n := f.tokenReviews.Load() + f.accessReviews.Load() - before; n != 0 {
		t.Fatalf("%d junk tokens cost %d reviews, want 0", flood, n)
	}
}

// Well-formed tokens of the cluster, each new one, are reviewed within the
// metrics port's budget: never more than metricsReviewsInFlight at once,
// and a burst and a rate; beyond it they are answered 429 at once. A token
// already reviewed is served throughout.
func TestNewTokensAtTheMetricsPortAreReviewedWithinABudget(t *testing.T) {
	cluster, f, h, reader := readerServed(t)
	const flood = 200
	tokens := make([]string, 2*flood)
	for i := range tokens {
		tokens[i] = "Bearer " + cluster.mint(t, "flood-"+strconv.Itoa(i))
	}
	start := time.Now()
	reviewsBefore := f.tokenReviews.Load()

	// While the API server holds the reviews, all the others are answered.
	f.hold = make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for _, tok := range tokens[:flood] {
		wg.Go(func() {
			code := get(h, "/metrics", tok)
			mu.Lock()
			codes[code]++
			mu.Unlock()
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		busy := codes[http.StatusTooManyRequests]
		mu.Unlock()
		if busy >= flood-metricsReviewsInFlight || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	if busy := codes[http.StatusTooManyRequests]; busy != flood-metricsReviewsInFlight {
		t.Errorf("%d of %d new tokens answered 429 while the reviews hung; want all but the %d in flight", busy, flood, metricsReviewsInFlight)
	}
	mu.Unlock()
	if got := get(h, "/metrics", reader); got != http.StatusOK {
		t.Errorf("the reviewed reader during the flood: %d", got)
	}
	close(f.hold)
	wg.Wait()

	// One after the other, they get the burst and what the rate refills.
	for _, tok := range tokens[flood:] {
		codes[get(h, "/metrics", tok)]++
	}
	elapsed := time.Since(start)
	reviews := f.tokenReviews.Load() - reviewsBefore
	bound := int64(metricsReviewBurst + metricsReviewRate*elapsed.Seconds() + 1)
	t.Logf("%d new tokens in %v: %v; %d TokenReviews (bound %d)", 2*flood, elapsed.Round(time.Millisecond), codes, reviews, bound)
	if reviews > bound {
		t.Errorf("%d TokenReviews for %d new tokens; the budget allows %d", reviews, 2*flood, bound)
	}
	if codes[http.StatusTooManyRequests] < 2*flood-int(bound) {
		t.Errorf("only %d of %d new tokens were answered 429", codes[http.StatusTooManyRequests], 2*flood)
	}
}

// The metrics reviews and the gRPC reviews each have a client-side limiter
// of their own, and neither is the service's.
func TestUseClusterGivesEachSideItsOwnLimiter(t *testing.T) {
	shared := flowcontrol.NewTokenBucketRateLimiter(5, 10)
	cfg := &rest.Config{Host: "https://127.0.0.1:1", UserAgent: "nodeconfig-test", QPS: 5, Burst: 10, RateLimiter: shared}
	reviews, metrics, err := clusterClients(cfg)
	if err != nil {
		t.Fatal(err)
	}
	grpcSide := reviews.RESTClient().GetRateLimiter()
	metricsSide := metrics.Authentication.RESTClient().GetRateLimiter()
	if grpcSide == shared || metricsSide == shared || grpcSide == metricsSide {
		t.Fatal("the reviews share a client-side limiter")
	}
	if metrics.Authorization.RESTClient().GetRateLimiter() != metricsSide {
		t.Fatal("the metrics port's TokenReviews and SubjectAccessReviews have two limiters; want one budget")
	}
	if got := metricsSide.QPS(); got != metricsClientQPS {
		t.Fatalf("the metrics client allows %v requests a second, want %v", got, metricsClientQPS)
	}
}

// readerServed is a metrics guard that checks tokens against the keys of a
// cluster of its own, with a reader RBAC allows, already served once.
func readerServed(t *testing.T) (cluster signer, f *fakeReviews, h http.Handler, reader string) {
	t.Helper()
	cluster = newSigner(t, "cluster")
	f = &fakeReviews{users: map[string]string{"reader": "reader"}, allowed: map[string]bool{"reader": true}}
	h = f.guard(t, readKeys(t, cluster)).wrap(okHandler)
	reader = "Bearer " + cluster.mint(t, "reader")
	if got := get(h, "/metrics", reader); got != http.StatusOK {
		t.Fatalf("the reader before the flood: %d", got)
	}
	return cluster, f, h, reader
}
