package agents

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	tokens, err := NewNodeTokens(client.CoreV1().ServiceAccounts("nodeconfig-system"), "nodeconfig-reconciler", "nodeconfig-agent/{node}", 16)
	if err != nil {
		t.Fatal(err)
	}
	tokens.now = func() time.Time { return now }
	if _, err := NewNodeTokens(client.CoreV1().ServiceAccounts("x"), "r", "nodeconfig-agent", 16); err == nil {
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
	now = now.Add(TokenLifetime * 7 / 10)
	if a, _ := tokens.Token(context.Background(), "node-a"); a != got[0] || requests.Load() != 2 {
		t.Fatalf("at 70 %% of its life node-a's token was replaced (%q, %d requests)", a, requests.Load())
	}
	now = now.Add(TokenLifetime * 2 / 10)
	if a, _ := tokens.Token(context.Background(), "node-a"); a == got[0] {
		t.Fatal("at 90 % of its life node-a's token was still reused")
	}
	tokens.Forget("node-b")
	if b2, _ := tokens.Token(context.Background(), "node-b"); b2 == b {
		t.Fatal("a forgotten node's token was reused")
	}
}
