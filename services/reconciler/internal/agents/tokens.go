package agents

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"google.golang.org/grpc/credentials"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/lru"
)

// NodeTokens mints, for each node, a short-lived token of the reconciler's
// own ServiceAccount whose audience names that node (the TokenRequest API),
// so that a token captured on one node is refused by every other. A token
// is reused until 80 % of its life has passed (or TokenOptions.RenewAfter,
// if sooner), then replaced on next use.
type NodeTokens struct {
	accounts   corev1client.ServiceAccountInterface
	account    string
	audience   string // with {node}
	lifetime   time.Duration
	renewAfter time.Duration // 0: at 80 % of the life granted
	now        func() time.Time

	mu       sync.Mutex
	tokens   *lru.Cache // node -> nodeToken
	inflight singleflight.Group
	// header is the last tokens' JWT header, kept once for all (mu).
	header string
}

type nodeToken struct {
	token   compactToken
	renewAt time.Time
}

// DefaultTokenLifetime is how long a node's token is valid unless
// TokenOptions say otherwise. Its reach is one node, so its life is about
// what the API server pays: at 5,000 nodes an hour is under two
// TokenRequests a second.
const DefaultTokenLifetime = time.Hour

// MinTokenLifetime is the shortest life the API server grants: it refuses
// a TokenRequest with expirationSeconds under 600 ("may not specify a
// duration less than 10 minutes", MinTokenAgeSec in k8s.io/kubernetes
// pkg/apis/authentication/validation). It may shorten a longer one
// (--service-account-max-token-expiration); the life granted is what counts.
const MinTokenLifetime = 10 * time.Minute

// TokenOptions tune the tokens' life and renewal.
type TokenOptions struct {
	// Lifetime asked for each token (0: DefaultTokenLifetime); at least
	// MinTokenLifetime.
	Lifetime time.Duration
	// RenewAfter replaces a token this long after it was minted, if that
	// comes before 80 % of the life granted (0: at 80 %). Tests set it to
	// see renewals within seconds, which no lifetime the API server
	// accepts would give.
	RenewAfter time.Duration
}

const requestTimeout = 10 * time.Second

// NewNodeTokens builds the minter for ServiceAccount account (in the
// namespace accounts is for) and an audience with {node} in it.
func NewNodeTokens(accounts corev1client.ServiceAccountInterface, account, audience string, maxNodes int, o TokenOptions) (*NodeTokens, error) {
	if !strings.Contains(audience, "{node}") {
		return nil, fmt.Errorf("agent token audience %q must contain {node}: a token's reach is one node", audience)
	}
	if o.Lifetime == 0 {
		o.Lifetime = DefaultTokenLifetime
	}
	if o.Lifetime < MinTokenLifetime {
		return nil, fmt.Errorf("agent token lifetime %v: the API server refuses a TokenRequest for less than %v", o.Lifetime, MinTokenLifetime)
	}
	if o.RenewAfter < 0 || o.RenewAfter >= o.Lifetime {
		return nil, fmt.Errorf("agent token renewal after %v: want 0 (at 80 %% of the life granted) or a duration under the lifetime (%v)", o.RenewAfter, o.Lifetime)
	}
	return &NodeTokens{accounts: accounts, account: account, audience: audience, lifetime: o.Lifetime, renewAfter: o.RenewAfter,
		now: time.Now, tokens: lru.New(maxNodes)}, nil
}

// Audience is the audience of node's tokens.
func (t *NodeTokens) Audience(node string) string {
	return strings.ReplaceAll(t.audience, "{node}", node)
}

// Token returns a valid token for node, minting one if needed; concurrent
// callers for one node share one request.
func (t *NodeTokens) Token(ctx context.Context, node string) (string, error) {
	tok, err := t.token(ctx, node)
	if err != nil {
		return "", err
	}
	return tok.text(""), nil
}

func (t *NodeTokens) token(ctx context.Context, node string) (compactToken, error) {
	t.mu.Lock()
	v, ok := t.tokens.Get(node)
	t.mu.Unlock()
	if ok && t.now().Before(v.(nodeToken).renewAt) {
		return v.(nodeToken).token, nil
	}
	tok, err, _ := t.inflight.Do(node, func() (any, error) {
		// A request that finished since the look above already minted one.
		t.mu.Lock()
		v, ok := t.tokens.Get(node)
		t.mu.Unlock()
		if ok && t.now().Before(v.(nodeToken).renewAt) {
			return v.(nodeToken).token, nil
		}
		// Detached from the first caller: the others wait on this request.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), requestTimeout)
		defer cancel()
		seconds := int64(t.lifetime / time.Second)
		tr, err := t.accounts.CreateToken(ctx, t.account, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: []string{t.Audience(node)}, ExpirationSeconds: &seconds},
		}, metav1.CreateOptions{})
		if err != nil {
			return compactToken{}, fmt.Errorf("token for node %s (TokenRequest of ServiceAccount %s): %w", node, t.account, err)
		}
		issued := t.now()
		life := tr.Status.ExpirationTimestamp.Sub(issued)
		if life <= 0 {
			life = t.lifetime
		}
		renew := life * 8 / 10
		if t.renewAfter > 0 {
			renew = min(renew, t.renewAfter)
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		tok := compact(tr.Status.Token, &t.header)
		t.tokens.Add(node, nodeToken{token: tok, renewAt: issued.Add(renew)})
		return tok, nil
	})
	if err != nil {
		return compactToken{}, err
	}
	return tok.(compactToken), nil
}

// Forget drops a node's token (the node is gone).
func (t *NodeTokens) Forget(node string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.tokens.Remove(node)
}

// For returns the per-call credentials of one node's connection.
func (t *NodeTokens) For(node string) credentials.PerRPCCredentials {
	return nodeCreds{tokens: t, node: node}
}

type nodeCreds struct {
	tokens *NodeTokens
	node   string
}

func (c nodeCreds) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	tok, err := c.tokens.token(ctx, c.node)
	if err != nil {
		return nil, err
	}
	return map[string]string{"authorization": tok.text("Bearer ")}, nil
}

// RequireTransportSecurity: a token never crosses the network in clear text.
func (nodeCreds) RequireTransportSecurity() bool { return true }
