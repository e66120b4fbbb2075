package server

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"nodeconfig.io/services/reconciler/internal/agents"
)

// election is a standby's view of who leads, set by the test; looks
// counts how often the standby asked.
type election struct {
	mu     sync.Mutex
	leader string
	looks  int
}

func (e *election) GetLeader() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.looks++
	return e.leader
}

func (e *election) IsLeader() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leader == "self"
}

func (e *election) set(leader string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.leader = leader
}

func (e *election) looked() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.looks
}

// A standby mints no token while nobody leads or while it leads itself,
// and a token for every node's agent once another replica leads.
func TestStandbyMintsEveryNodesTokenOnlyWhileAnotherLeads(t *testing.T) {
	kube := kubefake.NewClientset()
	var minted atomic.Int64
	kube.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		minted.Add(1)
		return true, &authenticationv1.TokenRequest{Status: authenticationv1.TokenRequestStatus{
			Token: "tok", ExpirationTimestamp: metav1.NewTime(time.Now().Add(time.Hour))}}, nil
	})
	o := options(t, kube, "n1", "n2", "n3")
	tokens, err := agents.NewNodeTokens(kube.CoreV1().ServiceAccounts("ns"), "r", "a/{node}", 100, agents.TokenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{o: o, pool: agents.Options{SocketTemplate: o.Agents.SocketTemplate, Tokens: tokens}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	el := &election{}
	go func() {
		defer close(done)
		r.standBy(ctx, el)
	}()
	defer func() {
		cancel()
		<-done
	}()
	waitLooks := func(what string, n int) {
		t.Helper()
		from := el.looked()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return el.looked() >= from+n, nil
		}); err != nil {
			t.Fatalf("%s: the standby did not look at the election %d times: %v", what, n, err)
		}
	}
	waitLooks("nobody leads", 2)
	el.set("self")
	waitLooks("it leads", 2)
	if n := minted.Load(); n != 0 {
		t.Fatalf("%d TokenRequests while no other replica led, want none", n)
	}
	el.set("other")
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return minted.Load() == 3, nil
	}); err != nil {
		t.Fatalf("%d TokenRequests once another replica led, want one for each of 3 nodes: %v", minted.Load(), err)
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if _, err := tokens.Token(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if n := minted.Load(); n != 3 {
		t.Fatalf("%d TokenRequests after the calls, want 3: each call finds its node's token ready", n)
	}
}
