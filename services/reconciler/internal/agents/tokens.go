package agents

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/singleflight"
	"google.golang.org/grpc/credentials"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// NodeTokens mints, for each node, a short-lived token of the reconciler's
// own ServiceAccount whose audience names that node (the TokenRequest API),
// so that a token captured on one node is refused by every other. A token
// is reused until 80 % of its life has passed (or TokenOptions.RenewAfter,
// if sooner), then replaced on next use. Run replaces each one before
// that, in the background: a rollout after a quiet hour finds every node's
// token valid, instead of minting thousands on its call path at the
// client's rate limit.
type NodeTokens struct {
	accounts   corev1client.ServiceAccountInterface
	account    string
	audience   string // with {node}
	lifetime   time.Duration
	renewAfter time.Duration // 0: at 80 % of the life granted
	boundPod   *authenticationv1.BoundObjectReference
	now        func() time.Time

	requests *prometheus.CounterVec // by when: ahead, on_use

	// tokens holds each node's nodeToken until it expires, the least
	// recently used dropped past the most nodes kept.
	tokens *cache.LRUExpireCache
	// mu makes a renewal's look for its node and its store one step
	// against Forget, and guards header.
	mu       sync.Mutex
	inflight singleflight.Group
	// header is the last tokens' JWT header, kept once for all (mu).
	header string
}

type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }

type nodeToken struct {
	token compactToken
	// renewAt: replaced on use from then on; refreshAt, before it: replaced
	// by Run from then on.
	renewAt, refreshAt time.Time
}

// DefaultTokenLifetime is how long a node's token is valid unless
// TokenOptions say otherwise. Its reach is one node, so its life is about
// what the API server pays: renewed at about 60 % of an hour, 5,000 nodes'
// tokens are 2.3 TokenRequests a second.
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
	// BoundPod, when set, is the reconciler's own Pod: each token is bound
	// to it, so the API server stops honouring the tokens once the Pod is
	// gone, and one stolen from a replica dies with that replica.
	BoundPod *authenticationv1.BoundObjectReference
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
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeconfig_agent_token_requests_total",
		Help: "TokenRequests for the agents' per-node tokens, by when: ahead (renewed in the background), prefetch (minted in parallel before a node's first call, as a replica starts leading), standby (minted while another replica leads, ready for a fail-over) or on_use (on a call's path, none being valid: a rising count says the renewal ahead falls behind).",
	}, []string{"when"})
	// Both series from the start, at 0: a rate over them needs no first request.
	for _, w := range []mintFor{onUse, ahead, prefetch, standby} {
		requests.WithLabelValues(w.String())
	}
	t := &NodeTokens{accounts: accounts, account: account, audience: audience, lifetime: o.Lifetime, renewAfter: o.RenewAfter,
		boundPod: o.BoundPod, now: time.Now, requests: requests}
	t.tokens = cache.NewLRUExpireCacheWithClock(maxNodes, clockFunc(func() time.Time { return t.now() }))
	return t, nil
}

// Register adds the TokenRequest counts to reg.
func (t *NodeTokens) Register(reg prometheus.Registerer) {
	reg.MustRegister(t.requests)
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
	if tok, ok := t.fresh(node, false); ok {
		return tok, nil
	}
	return t.mint(ctx, node, onUse)
}

// mintFor says why a token is minted: it decides when a token counts as
// fresh, whether a forgotten node's is kept, and the requests' label.
type mintFor int

const (
	onUse    mintFor = iota // on a call's path, none being valid
	ahead                   // Run's renewal of a token held
	prefetch                // Prefetch's, before the node's first call
	standby                 // StandBy's, while another replica leads
)

func (w mintFor) String() string {
	switch w {
	case ahead:
		return "ahead"
	case prefetch:
		return "prefetch"
	case standby:
		return "standby"
	}
	return "on_use"
}

// fresh returns node's token if it is not yet due: for a call, or ahead,
// for Run.
func (t *NodeTokens) fresh(node string, ahead bool) (compactToken, bool) {
	v, ok := t.tokens.Get(node)
	if !ok {
		return compactToken{}, false
	}
	tok := v.(nodeToken)
	due := tok.renewAt
	if ahead {
		due = tok.refreshAt
	}
	return tok.token, t.now().Before(due)
}

// mint requests a new token for node unless, by then, one is fresh;
// concurrent callers for one node share one request. A renewal ahead does
// not bring back a node forgotten meanwhile.
func (t *NodeTokens) mint(ctx context.Context, node string, why mintFor) (compactToken, error) {
	tok, err, _ := t.inflight.Do(node, func() (any, error) {
		// A request that finished since the caller's look already minted one.
		if tok, ok := t.fresh(node, why == ahead); ok {
			return tok, nil
		}
		// Detached from the first caller: the others wait on this request.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), requestTimeout)
		defer cancel()
		t.requests.WithLabelValues(why.String()).Inc()
		seconds := int64(t.lifetime / time.Second)
		tr, err := t.accounts.CreateToken(ctx, t.account, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: []string{t.Audience(node)}, ExpirationSeconds: &seconds, BoundObjectRef: t.boundPod},
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
		if _, kept := t.tokens.Get(node); why == ahead && !kept {
			return tok, nil
		}
		t.tokens.Add(node, nodeToken{token: tok, renewAt: issued.Add(renew), refreshAt: issued.Add(refreshDelay(renew))}, life)
		return tok, nil
	})
	if err != nil {
		return compactToken{}, err
	}
	return tok.(compactToken), nil
}

// refreshDelay is when, of a token's time until renewal, Run replaces it:
// anywhere from 60 % to 90 % of it, so that the thousands of tokens one
// rollout mints fall due over a spell (a fifth of an hour for hour-long
// tokens) rather than at once.
func refreshDelay(renew time.Duration) time.Duration {
	return renew*6/10 + rand.N(renew*3/10+1)
}

// refreshScan is how often Run looks for tokens due for replacement.
const refreshScan = 5 * time.Second

// Run replaces tokens in the background, each once its refresh time has
// come, one request at a time (paced by the client's rate limit), until
// ctx ends. A failure ends the pass: the next scan tries again.
func (t *NodeTokens) Run(ctx context.Context, log *slog.Logger) {
	tick := time.NewTicker(refreshScan)
	defer tick.Stop()
	var warned time.Time
	for {
		if err := t.refreshDue(ctx); err != nil && ctx.Err() == nil && time.Since(warned) >= time.Minute {
			// Once a minute at most: an outage would otherwise say it every scan.
			warned = time.Now()
			log.Warn("cannot renew agent tokens ahead of use; each is renewed on use instead", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// refreshDue replaces the tokens whose refresh time has come, soonest
// first, and stops at the first failure.
func (t *NodeTokens) refreshDue(ctx context.Context) error {
	now := t.now()
	type due struct {
		node string
		at   time.Time
	}
	var all []due
	for _, n := range t.tokens.Keys() {
		if v, ok := t.tokens.Get(n); ok && !now.Before(v.(nodeToken).refreshAt) {
			all = append(all, due{n.(string), v.(nodeToken).refreshAt})
		}
	}
	slices.SortFunc(all, func(a, b due) int { return a.at.Compare(b.at) })
	for _, d := range all {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if _, err := t.mint(ctx, d.node, ahead); err != nil {
			return err
		}
	}
	return nil
}

// Prefetch mints the tokens of nodes that hold none yet, at most parallel
// requests at a time, in the order given, until done or ctx ends. A
// leader's first pass over the fleet calls every node's agent, each call
// first waiting for its node's token: minted here, ahead of the workers
// and parallel beyond them, the requests' latency leaves the workers'
// path. The tokens are the ones the calls would mint a moment later (same
// account, audience, binding and life); a failure leaves its node's token
// to be minted on use. It returns how many of the nodes got a token from
// its requests (or from a call's request it joined).
func (t *NodeTokens) Prefetch(ctx context.Context, nodes []string, parallel int) int {
	return t.mintMissing(ctx, nodes, parallel, prefetch)
}

// StandBy mints, one request at a time, the tokens of nodes that hold none
// yet, until done or ctx ends, and returns how many it minted. A standby
// replica calls it so that, should it come to lead, its first pass finds
// every token ready: a new leader otherwise mints one per node, each an
// RSA signature of the API server, while the fleet waits. The tokens are
// those a leader would mint (bound to this replica's own Pod when
// TokenOptions.BoundPod says so) and leave this process only for the
// agent whose certificate a call verified.
func (t *NodeTokens) StandBy(ctx context.Context, nodes []string) int {
	return t.mintMissing(ctx, nodes, 1, standby)
}

func (t *NodeTokens) mintMissing(ctx context.Context, nodes []string, parallel int, why mintFor) int {
	var g errgroup.Group
	g.SetLimit(max(parallel, 1))
	var minted atomic.Int64
	for _, node := range nodes {
		if ctx.Err() != nil {
			break
		}
		if _, ok := t.fresh(node, false); ok {
			continue
		}
		g.Go(func() error {
			if ctx.Err() != nil {
				return nil
			}
			if _, err := t.mint(ctx, node, why); err == nil {
				minted.Add(1)
			}
			return nil
		})
	}
	_ = g.Wait()
	return int(minted.Load())
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
