package agents

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// gatedAccounts answer TokenRequests only once the gate opens, counting
// the requests in flight and the most at once (the fake clientset runs
// one reaction at a time, so it cannot show parallel requests).
type gatedAccounts struct {
	corev1client.ServiceAccountInterface
	gate chan struct{}

	mu             sync.Mutex
	inFlight, peak int
	asked          map[string]int // by audience
	now            time.Time
}

func (g *gatedAccounts) CreateToken(ctx context.Context, _ string, tr *authenticationv1.TokenRequest, _ metav1.CreateOptions) (*authenticationv1.TokenRequest, error) {
	g.mu.Lock()
	g.inFlight++
	g.peak = max(g.peak, g.inFlight)
	g.asked[tr.Spec.Audiences[0]]++
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.inFlight--
		g.mu.Unlock()
	}()
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out := tr.DeepCopy()
	out.Status.Token = "token-for-" + tr.Spec.Audiences[0]
	out.Status.ExpirationTimestamp = metav1.NewTime(g.now.Add(time.Hour))
	return out, nil
}

func (g *gatedAccounts) state() (inFlight, peak int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inFlight, g.peak
}

// Prefetch mints every node's token before any call needs it, at most
// its parallelism at a time; a call afterwards finds its token and makes
// no request, and a node holding a fresh token is not asked for again.
func TestPrefetchMintsEveryNodesTokenAtMostParallelAtATime(t *testing.T) {
	now := time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)
	accounts := &gatedAccounts{gate: make(chan struct{}), asked: map[string]int{}, now: now}
	tokens, err := NewNodeTokens(accounts, "r", "a/{node}", 100, TokenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokens.now = func() time.Time { return now }
	var nodes []string
	for i := range 40 {
		nodes = append(nodes, fmt.Sprintf("node-%02d", i))
	}
	// node-00 already holds a token (minted on a call): Prefetch skips it.
	close(accounts.gate)
	if _, err := tokens.Token(context.Background(), "node-00"); err != nil {
		t.Fatal(err)
	}
	accounts.gate = make(chan struct{})

	const parallel = 4
	done := make(chan int)
	go func() { done <- tokens.Prefetch(context.Background(), nodes, parallel) }()
	// Held at the gate, the requests pile up to the bound and no further.
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		inFlight, _ := accounts.state()
		return inFlight == parallel, nil
	}); err != nil {
		t.Fatalf("requests in flight never reached %d: %v", parallel, err)
	}
	close(accounts.gate)
	minted := <-done
	if _, peak := accounts.state(); peak != parallel {
		t.Fatalf("at most %d TokenRequests in flight at once, want %d", peak, parallel)
	}
	if minted != 39 {
		t.Fatalf("Prefetch says %d tokens minted, want 39 (every node but node-00)", minted)
	}
	for _, n := range nodes {
		if got := accounts.asked["a/"+n]; got != 1 {
			t.Fatalf("%s: %d TokenRequests, want 1", n, got)
		}
		if tok, err := tokens.Token(context.Background(), n); err != nil || tok != "token-for-a/"+n {
			t.Fatalf("%s's token after Prefetch: %q %v", n, tok, err)
		}
	}
	if got := testutil.ToFloat64(tokens.requests.WithLabelValues("prefetch")); got != 39 {
		t.Fatalf("nodeconfig_agent_token_requests_total{when=prefetch} %v, want 39", got)
	}
	if got := testutil.ToFloat64(tokens.requests.WithLabelValues("on_use")); got != 1 {
		t.Fatalf("nodeconfig_agent_token_requests_total{when=on_use} %v, want 1 (node-00's call before Prefetch)", got)
	}
}

// A pool prefetches only the tokens of nodes whose agent it can reach (a
// ready agent Pod on the node), and none when told 0 at a time.
func TestPoolPrefetchesTokensOfNodesWithAnAgentOnly(t *testing.T) {
	idx := agentPods(t)
	accounts := &gatedAccounts{gate: make(chan struct{}), asked: map[string]int{}, now: time.Now()}
	close(accounts.gate)
	tokens, err := NewNodeTokens(accounts, "r", "a/{node}", 100, TokenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodes := []string{"node-a", "node-b", "node-c"}
	off := New(Options{Pods: corelisters.NewPodLister(idx), PodSelector: labels.Everything(), Port: 7601, Tokens: tokens})
	if n := off.PrefetchTokens(context.Background(), nodes); n != 0 || len(accounts.asked) != 0 {
		t.Fatalf("TokenPrefetch 0: %d minted, %v asked; want none", n, accounts.asked)
	}
	pool := New(Options{Pods: corelisters.NewPodLister(idx), PodSelector: labels.Everything(), Port: 7601, Tokens: tokens, TokenPrefetch: 2})
	defer pool.Close()
	if n := pool.PrefetchTokens(context.Background(), nodes); n != 1 || accounts.asked["a/node-a"] != 1 || len(accounts.asked) != 1 {
		t.Fatalf("%d minted, asked %v; want node-a's token alone (node-b's agent is not ready, node-c has none)", n, accounts.asked)
	}
}

// A standby mints the tokens of the nodes with an agent that hold none,
// one request at a time (it must not compete with the leader's calls),
// counted as standby's.
func TestStandByMintsMissingTokensOneAtATime(t *testing.T) {
	accounts := &gatedAccounts{gate: make(chan struct{}), asked: map[string]int{}, now: time.Now()}
	tokens, err := NewNodeTokens(accounts, "r", "a/{node}", 100, TokenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	static := map[string]string{}
	var nodes []string
	for i := range 6 {
		n := fmt.Sprintf("node-%d", i)
		static[n], nodes = "127.0.0.1:7601", append(nodes, n)
	}
	pool := New(Options{Static: static, Tokens: tokens})
	defer pool.Close()
	done := make(chan int)
	go func() { done <- pool.StandByTokens(context.Background(), append(nodes, "no-agent")) }()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		inFlight, _ := accounts.state()
		return inFlight == 1, nil
	}); err != nil {
		t.Fatalf("no request in flight: %v", err)
	}
	close(accounts.gate)
	if n := <-done; n != len(nodes) {
		t.Fatalf("StandByTokens says %d minted, want %d", n, len(nodes))
	}
	if _, peak := accounts.state(); peak != 1 {
		t.Fatalf("%d TokenRequests in flight at once, want 1", peak)
	}
	if accounts.asked["a/no-agent"] != 0 || len(accounts.asked) != len(nodes) {
		t.Fatalf("asked %v: want one request for each node with an agent", accounts.asked)
	}
	if got := testutil.ToFloat64(tokens.requests.WithLabelValues("standby")); got != float64(len(nodes)) {
		t.Fatalf("nodeconfig_agent_token_requests_total{when=standby} %v, want %d", got, len(nodes))
	}
	// A second pass finds every token fresh and asks for none.
	if n := pool.StandByTokens(context.Background(), nodes); n != 0 {
		t.Fatalf("a second pass minted %d", n)
	}
	for _, n := range nodes {
		if got := accounts.asked["a/"+n]; got != 1 {
			t.Fatalf("%s: %d TokenRequests, want 1", n, got)
		}
	}
}
