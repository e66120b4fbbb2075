package agents

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Each node gets a token whose only audience names it; a token is reused
// until 80 % of its life, concurrent callers share one request, and a
// forgotten node's token is not reused.
func TestNodeTokensAreScopedToOneNodeAndReused(t *testing.T) {
	client := fake.NewClientset()
	var requests atomic.Int64
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	client.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		n := requests.Add(1)
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		if name := a.(k8stesting.CreateActionImpl).Name; name != "nodeconfig-reconciler" {
			t.Errorf("token requested for ServiceAccount %q", name)
		}
		tr.Status.Token = tr.Spec.Audiences[0] + "#" + string(rune('0'+n))
		tr.Status.ExpirationTimestamp = metav1.NewTime(now.Add(time.Duration(*tr.Spec.ExpirationSeconds) * time.Second))
		return true, tr, nil
	})
	tokens, err := NewNodeTokens(client.CoreV1().ServiceAccounts("nodeconfig-system"), "nodeconfig-reconciler", "nodeconfig-agent/{node}", 16, TokenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokens.now = func() time.Time { return now }
	if _, err := NewNodeTokens(client.CoreV1().ServiceAccounts("x"), "r", "nodeconfig-agent", 16, TokenOptions{}); err == nil {
		t.Fatal("an audience without {node} was accepted: one token would open every node")
	}

	var wg sync.WaitGroup
	got := make([]string, 20)
	for i := range got {
		wg.Go(func() {
			tok, err := tokens.Token(context.Background(), "node-a")
			if err != nil {
				t.Error(err)
			}
			got[i] = tok
		})
	}
	wg.Wait()
	if requests.Load() != 1 || got[0] != "nodeconfig-agent/node-a#1" || got[19] != got[0] {
		t.Fatalf("20 concurrent callers: %d requests, tokens %q...; want one request for audience nodeconfig-agent/node-a", requests.Load(), got[0])
	}
	b, _ := tokens.Token(context.Background(), "node-b")
	if b != "nodeconfig-agent/node-b#2" {
		t.Fatalf("node-b's token %q, want one of its own audience", b)
	}
	now = now.Add(DefaultTokenLifetime * 7 / 10)
	if a, _ := tokens.Token(context.Background(), "node-a"); a != got[0] || requests.Load() != 2 {
		t.Fatalf("at 70 %% of its life node-a's token was replaced (%q, %d requests)", a, requests.Load())
	}
	now = now.Add(DefaultTokenLifetime * 2 / 10)
	if a, _ := tokens.Token(context.Background(), "node-a"); a == got[0] {
		t.Fatal("at 90 % of its life node-a's token was still reused")
	}
	tokens.Forget("node-b")
	if b2, _ := tokens.Token(context.Background(), "node-b"); b2 == b {
		t.Fatal("a forgotten node's token was reused")
	}
}

// tokenServer answers TokenRequests as the API server does: refused under
// 10 minutes, granted for what was asked (capped at maxLife when set);
// each answer's token is numbered.
func tokenServer(t *testing.T, now *time.Time, maxLife time.Duration) (*fake.Clientset, *[]int64) {
	client := fake.NewClientset()
	var asked []int64
	client.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		secs := *tr.Spec.ExpirationSeconds
		asked = append(asked, secs)
		if secs < 600 {
			return true, nil, fmt.Errorf("spec.expirationSeconds: Invalid value: %d: may not specify a duration less than 10 minutes", secs)
		}
		life := time.Duration(secs) * time.Second
		if maxLife > 0 {
			life = min(life, maxLife)
		}
		tr.Status.Token = fmt.Sprintf("token-%d", len(asked))
		tr.Status.ExpirationTimestamp = metav1.NewTime(now.Add(life))
		return true, tr, nil
	})
	return client, &asked
}

// clockedTokens are NodeTokens for the audience a/{node} from
// tokenServer, on a clock the test moves (*now).
func clockedTokens(t *testing.T, maxNodes int, o TokenOptions) (tokens *NodeTokens, client *fake.Clientset, asked *[]int64, now *time.Time) {
	t.Helper()
	now = new(time.Time)
	*now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	client, asked = tokenServer(t, now, 0)
	tokens, err := NewNodeTokens(client.CoreV1().ServiceAccounts("x"), "r", "a/{node}", maxNodes, o)
	if err != nil {
		t.Fatal(err)
	}
	tokens.now = func() time.Time { return *now }
	return tokens, client, asked, now
}

// The lifetime asked for is the option's; one under the API server's
// 10 minutes, or a renewal that is not before the lifetime, is refused at
// start. RenewAfter replaces a token that long after it was minted, and
// 80 % of the life granted still wins when it comes first.
func TestNodeTokensLifetimeAndRenewAfter(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	for _, bad := range []TokenOptions{{Lifetime: 9 * time.Minute}, {Lifetime: time.Hour, RenewAfter: time.Hour}, {RenewAfter: -time.Second}} {
		client, _ := tokenServer(t, &now, 0)
		if _, err := NewNodeTokens(client.CoreV1().ServiceAccounts("x"), "r", "a/{node}", 16, bad); err == nil {
			t.Errorf("options %+v accepted", bad)
		}
	}

	client, asked := tokenServer(t, &now, 0)
	tokens, err := NewNodeTokens(client.CoreV1().ServiceAccounts("x"), "r", "a/{node}", 16,
		TokenOptions{Lifetime: MinTokenLifetime, RenewAfter: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tokens.now = func() time.Time { return now }
	first, err := tokens.Token(context.Background(), "n")
	if err != nil {
		t.Fatal(err)
	}
	if len(*asked) != 1 || (*asked)[0] != 600 {
		t.Fatalf("asked for %v seconds, want [600]", *asked)
	}
	now = now.Add(1900 * time.Millisecond)
	if tok, _ := tokens.Token(context.Background(), "n"); tok != first {
		t.Fatalf("replaced before RenewAfter: %q", tok)
	}
	now = now.Add(200 * time.Millisecond)
	if tok, _ := tokens.Token(context.Background(), "n"); tok == first || len(*asked) != 2 {
		t.Fatalf("not replaced after RenewAfter: %q, %d requests", tok, len(*asked))
	}

	// The API server grants 10 minutes of the hour asked for: renewal at
	// 8 minutes, before a RenewAfter of 30 minutes.
	client, asked = tokenServer(t, &now, 10*time.Minute)
	tokens, err = NewNodeTokens(client.CoreV1().ServiceAccounts("x"), "r", "a/{node}", 16, TokenOptions{RenewAfter: 30 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	tokens.now = func() time.Time { return now }
	first, _ = tokens.Token(context.Background(), "n")
	if (*asked)[0] != 3600 {
		t.Fatalf("asked for %d seconds by default, want 3600", (*asked)[0])
	}
	now = now.Add(8*time.Minute + time.Second)
	if tok, _ := tokens.Token(context.Background(), "n"); tok == first {
		t.Fatal("a token granted 10 minutes was still reused after 8")
	}
}

// Run's pass replaces each token before it falls due on use, the tokens
// of one rollout spread over a spell rather than at once, so a call after
// a quiet hour never waits on a TokenRequest; a forgotten node's token is
// not brought back, and a refused request ends the pass.
func TestNodeTokensAreRenewedAheadOfUse(t *testing.T) {
	tokens, client, asked, now := clockedTokens(t, 64, TokenOptions{})
	start, ctx := *now, context.Background()
	const nodes = 50
	minted := map[string]string{}
	for i := range nodes {
		node := fmt.Sprintf("node-%d", i)
		tok, err := tokens.Token(ctx, node)
		if err != nil {
			t.Fatal(err)
		}
		minted[node] = tok
	}
	tokens.Forget("node-0")
	renew := DefaultTokenLifetime * 8 / 10 // when a token falls due on use
	for _, step := range []struct {
		at                   time.Duration
		atLeast, atMost, sum int // requests of this pass; all so far
	}{
		{renew * 59 / 100, 0, 0, nodes},               // none is due yet
		{renew * 75 / 100, 1, nodes - 2, -1},          // some, not all: spread
		{renew * 91 / 100, 1, nodes - 2, 2*nodes - 1}, // the rest: each once, not node-0
		{renew + time.Minute, 0, 0, 2*nodes - 1},      // the renewed ones are not due
	} {
		*now = start.Add(step.at)
		before := len(*asked)
		if err := tokens.refreshDue(ctx); err != nil {
			t.Fatal(err)
		}
		if n := len(*asked) - before; n < step.atLeast || n > step.atMost || (step.sum >= 0 && len(*asked) != step.sum) {
			t.Fatalf("at %v of the renewal time: %d requests (%d in all), want %d to %d (%d in all)",
				step.at, n, len(*asked), step.atLeast, step.atMost, step.sum)
		}
	}
	for node, first := range minted {
		if node == "node-0" {
			continue
		}
		tok, err := tokens.Token(ctx, node)
		if err != nil || tok == first {
			t.Fatalf("%s after its renewal time: %q, %v; want a token minted ahead of use", node, tok, err)
		}
	}
	if len(*asked) != 2*nodes-1 {
		t.Fatalf("%d requests: a call after the renewal time minted on its own path", len(*asked)-(2*nodes-1))
	}
	if onUse, ahead := testutil.ToFloat64(tokens.requests.WithLabelValues("on_use")), testutil.ToFloat64(tokens.requests.WithLabelValues("ahead")); onUse != nodes || ahead != nodes-1 {
		t.Fatalf("counted %v requests on use and %v ahead, want %d and %d", onUse, ahead, nodes, nodes-1)
	}

	// An API server that refuses: one request per pass, not one per node.
	client.PrependReactor("create", "serviceaccounts", func(k8stesting.Action) (bool, runtime.Object, error) {
		*asked = append(*asked, 0)
		return true, nil, fmt.Errorf("serviceaccounts \"r\" is forbidden")
	})
	*now = now.Add(renew)
	before := len(*asked)
	if err := tokens.refreshDue(ctx); err == nil || len(*asked) != before+1 {
		t.Fatalf("refused: %v after %d requests, want the refusal after 1", err, len(*asked)-before)
	}
}

// Past maxNodes, making room drops the least recently used token.
func TestNodeTokensKeepAtMostMaxNodes(t *testing.T) {
	tokens, _, asked, now := clockedTokens(t, 2, TokenOptions{})
	ctx := context.Background()
	for _, node := range []string{"a", "b", "c"} {
		if _, err := tokens.Token(ctx, node); err != nil {
			t.Fatal(err)
		}
		*now = now.Add(time.Minute)
	}
	if kept := len(tokens.tokens.Keys()); kept != 2 {
		t.Fatalf("%d tokens kept, want 2", kept)
	}
	_, _ = tokens.Token(ctx, "b")
	_, _ = tokens.Token(ctx, "c")
	if len(*asked) != 3 {
		t.Fatalf("%d requests: b's or c's token was dropped, not a's (the least recently used)", len(*asked))
	}
}

// A node deleted while its token is being renewed in the background stays
// forgotten: the renewal does not bring its token back.
func TestNodeTokensRenewalDoesNotBringBackAForgottenNode(t *testing.T) {
	tokens, client, _, now := clockedTokens(t, 16, TokenOptions{})
	if _, err := tokens.Token(context.Background(), "gone"); err != nil {
		t.Fatal(err)
	}
	client.PrependReactor("create", "serviceaccounts", func(k8stesting.Action) (bool, runtime.Object, error) {
		tokens.Forget("gone") // the Node is deleted during the request
		return false, nil, nil
	})
	*now = now.Add(DefaultTokenLifetime)
	if err := tokens.refreshDue(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, kept := tokens.tokens.Get("gone"); kept {
		t.Fatal("the renewal brought back the token of a node forgotten during it")
	}
}

// With BoundPod, every token is bound to the reconciler's own Pod: the API
// server stops honouring it once that Pod is gone.
func TestNodeTokensAreBoundToTheReconcilersPod(t *testing.T) {
	client := fake.NewClientset()
	var bound *authenticationv1.BoundObjectReference
	client.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		bound = tr.Spec.BoundObjectRef
		tr.Status.Token = "t"
		tr.Status.ExpirationTimestamp = metav1.NewTime(time.Now().Add(time.Hour))
		return true, tr, nil
	})
	pod := &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "nodeconfig-reconciler-abc", UID: "uid-1"}
	tokens, err := NewNodeTokens(client.CoreV1().ServiceAccounts("nodeconfig-system"), "nodeconfig-reconciler", "nodeconfig-agent/{node}", 16, TokenOptions{BoundPod: pod})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tokens.Token(context.Background(), "node-a"); err != nil {
		t.Fatal(err)
	}
	if bound == nil || *bound != *pod {
		t.Fatalf("TokenRequest bound to %+v, want %+v", bound, pod)
	}
}
