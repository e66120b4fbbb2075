package authn

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"
)

// clusterKey is a signing key the fake cluster publishes.
type clusterKey struct {
	key crypto.Signer
	alg jose.SignatureAlgorithm
	id  string
}

func newClusterKey(t testing.TB, id string) clusterKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return clusterKey{key, jose.ES256, id}
}

// newRSAClusterKey is the kind of key a kube-apiserver signs its
// ServiceAccount tokens with by default (kubeadm's sa.key).
func newRSAClusterKey(t testing.TB, id string) clusterKey {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return clusterKey{key, jose.RS256, id}
}

func (k clusterKey) sign(t testing.TB, subject string) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: k.key}, (&jose.SignerOptions{}).WithHeader("kid", k.id))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok, err := jwt.Signed(signer).Claims(jwt.Claims{Subject: subject, Audience: []string{audience}, IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(time.Hour))}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// guardKnowing is fakeReviews's guard with the cluster's keys read.
func guardKnowing(t testing.TB, cluster clusterKey) (*Guard, *atomic.Int64) {
	t.Helper()
	g, reviews := fakeReviews(t)
	keys := NewKeySet(published(cluster), slog.Default())
	keys.refresh(context.Background())
	return g.WithKeys(keys), reviews
}

func published(keys ...clusterKey) func(context.Context) ([]byte, error) {
	return func(context.Context) ([]byte, error) {
		var set jose.JSONWebKeySet
		for _, k := range keys {
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.key.Public(), KeyID: k.id, Algorithm: string(k.alg), Use: "sig"})
		}
		return json.Marshal(set)
	}
}

// A forged token that claims the reconciler's identity, with the right
// audience and times but not the cluster's signature, is refused in the tap:
// it spends neither a TokenReview nor the reconciler's review budget, so a
// flood of them leaves room for the reconciler's own new token.
func TestForgedTokensClaimingTheReconcilerSpendNoReviewBudget(t *testing.T) {
	cluster := newClusterKey(t, "cluster-1")
	g, reviews := guardKnowing(t, cluster)

	forger := newClusterKey(t, "cluster-1") // claims the cluster's key id
	for i := range 5 * reviewBurst {
		err := tapCall(g, "tcp", forger.sign(t, reconciler), "/nodeconfig.v1.CheckpointService/Activate")
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "signature") {
			t.Fatalf("forged token %d: %v, want Unauthenticated naming the signature", i, err)
		}
	}
	if n := reviews.Load(); n != 0 {
		t.Fatalf("%d TokenReviews for forged tokens, want 0", n)
	}
	genuine := cluster.sign(t, reconciler)
	if err := tapCall(g, "tcp", genuine, "/nodeconfig.v1.CheckpointService/Activate"); err != nil {
		t.Fatalf("the reconciler's genuine token after the flood: %v", err)
	}
	if err := g.check(over("tcp", genuine), "/nodeconfig.v1.CheckpointService/Activate"); err != nil {
		t.Fatalf("the reconciler's genuine token: %v", err)
	}
}

// A token signed by a key the agent has not seen yet (the cluster rotated
// its keys) is refused, and the keys are read again at once: the caller's
// retry passes.
func TestATokenOfANewKeyIsAcceptedOnceTheKeysAreReadAgain(t *testing.T) {
	g, reviews := fakeReviews(t)
	old, rotated := newClusterKey(t, "old"), newClusterKey(t, "new")
	var mu sync.Mutex
	current := published(old)
	keys := NewKeySet(func(ctx context.Context) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		return current(ctx)
	}, slog.Default())
	keys.refresh(context.Background())
	g.WithKeys(keys)
	mu.Lock()
	current = published(old, rotated)
	mu.Unlock()
	keys.mu.Lock()
	keys.now = func() time.Time { return time.Now().Add(time.Hour) } // long after the last read
	keys.mu.Unlock()

	token := rotated.sign(t, reconciler)
	err := g.check(over("tcp", token), "/nodeconfig.v1.CheckpointService/Activate")
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), `key "new"`) {
		t.Fatalf("a token of a key not read yet: %v, want Unauthenticated naming the key", err)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return g.check(over("tcp", token), "/nodeconfig.v1.CheckpointService/Activate") == nil, nil
	}); err != nil {
		t.Fatal("the token of the rotated key is still refused: the keys were not read again")
	}
	if reviews.Load() != 1 {
		t.Fatalf("%d reviews, want the one that decided", reviews.Load())
	}
}

// Without keys (the API server does not publish them, or refuses this
// agent) every well-formed token goes to review, as before.
func TestWithoutKeysEveryTokenIsReviewed(t *testing.T) {
	g, reviews := fakeReviews(t)
	keys := NewKeySet(func(context.Context) ([]byte, error) { return nil, context.DeadlineExceeded }, slog.Default())
	keys.refresh(context.Background())
	g.WithKeys(keys)
	if err := g.check(over("tcp", mint(t, reconciler, time.Hour, audience)), "/nodeconfig.v1.CheckpointService/Activate"); err != nil {
		t.Fatal(err)
	}
	if reviews.Load() != 1 {
		t.Fatalf("%d reviews, want 1", reviews.Load())
	}
}

// A thousand tokens of unknown keys, while the keys are being read again,
// cost one read, not one each.
func TestUnknownKeysShareOneReadOfTheKeys(t *testing.T) {
	cluster := newClusterKey(t, "cluster-1")
	var fetches atomic.Int64
	release := make(chan struct{})
	keys := NewKeySet(func(ctx context.Context) ([]byte, error) {
		if fetches.Add(1) > 1 {
			<-release // the read the flood starts is slow
		}
		return published(cluster)(ctx)
	}, slog.Default())
	keys.refresh(context.Background())
	keys.mu.Lock()
	keys.now = func() time.Time { return time.Now().Add(time.Hour) }
	keys.mu.Unlock()
	g, reviews := fakeReviews(t)
	g.WithKeys(keys)
	stranger := newClusterKey(t, "unknown")
	token := stranger.sign(t, reconciler)
	for range 1000 {
		if err := tapCall(g, "tcp", token, "/nodeconfig.v1.CheckpointService/Activate"); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("a token of an unknown key: %v", err)
		}
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return fetches.Load() >= 2, nil
	}); err != nil {
		t.Fatal("the unknown key started no read of the keys")
	}
	close(release)
	if n := fetches.Load(); n != 2 {
		t.Fatalf("%d reads of the keys for 1,000 tokens of an unknown key; want the first and one more", n)
	}
	if reviews.Load() != 0 {
		t.Fatalf("%d TokenReviews for tokens of an unknown key", reviews.Load())
	}
}
