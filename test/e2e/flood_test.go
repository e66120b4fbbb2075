package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"golang.org/x/oauth2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/oauth"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/servekit/authn"
	"nodeconfig.io/test/framework/audit"
)

// The agent's memory limit in deploy/agent.yaml.
const agentMemoryLimit = 128 << 20

// 2,000 calls with bad tokens and 4 MiB bodies at one agent while the
// reconciler rolls a change to it: the change is promoted, the agent's
// peak RSS stays under its limit, and the TokenReviews it sent are bounded
// by its review budget, whatever the flood's size. Half the tokens are not
// JWTs (refused before the body is read, no review); half are well-formed
// tokens for this node's audience signed by a key that is not the
// cluster's, one in four of them claiming the reconciler's own identity:
// the agent knows the cluster's signing keys, so they are refused before
// their body is read and cost no review, and cannot spend the budget the
// reconciler's new tokens need. Without the keys they would be reviewed
// within the budget (the bound below holds either way). With them, every
// review the API server's audit log shows from the agent is of a token the
// reconciler minted for this node (the audit log's TokenRequests): at
// least one, at most one per token per review cache period.
func TestGarbageTokenFloodDoesNotStopARolloutNorExhaustTheAgent(t *testing.T) {
	const calls, workers = 2000, 8
	started := time.Now()
	e := newSecureNodes(t, 1)
	n := e.nodes[0]
	auditLog := filepath.Join(e.c.Dir, "audit.log")
	reviews := func() int {
		c, err := audit.Count(auditLog, func(ev audit.Event) bool {
			return ev.Verb == "create" && ev.ObjectRef.Resource == "tokenreviews" && strings.HasPrefix(ev.UserAgent, "nodeconfig-checkpointd")
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	reviewsBefore := reviews()
	reconcilerStarted := time.Now()
	e.startReconciler("r0", e.reconcilerArgs(reconcilerSA)...)

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", "forged"))
	if err != nil {
		t.Fatal(err)
	}
	forge := func(i int) string {
		subject := "system:serviceaccount:evil:flood-" + strconv.Itoa(i)
		if i%8 == 7 {
			// Claims the reconciler itself, to spend its review budget.
			subject = "system:serviceaccount:nodeconfig-system:" + reconcilerSA
		}
		tok, err := jwt.Signed(signer).Claims(jwt.Claims{
			Subject: subject, Audience: jwt.Audience{audienceOf(n.Name)},
			Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour)),
		}).Serialize()
		if err != nil {
			t.Error(err)
		}
		return tok
	}
	src := &nodeconfigv1.ConfigSource{Namespace: "evil", Name: "x", Uid: "u", ResourceVersion: "1", Key: "k"}
	big := &nodeconfigv1.PutCheckpointRequest{Source: src, Data: map[string]string{"k": strings.Repeat("x", 4<<20-4<<10)}}
	small := &nodeconfigv1.PutCheckpointRequest{Source: src, Data: map[string]string{"k": "maxPods: 1\n"}}
	var next atomic.Int64
	// The forged calls the agent refused for their signature, by the
	// cluster's keys (authn.KeySet's refusal): it held the keys and used them.
	var refusedByKeys atomic.Int64
	codeCounts := make([]map[codes.Code]int, workers)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		conn := e.dialTLS(n.CheckpointdAddr)
		codeCounts[w] = map[codes.Code]int{}
		wg.Go(func() {
			for {
				i := int(next.Add(1))
				if i > calls {
					return
				}
				// Even: not a JWT, 4 MiB. Odd: a forged JWT, with 4 MiB or
				// (one in two) a small body that gets as far as the review.
				tok, body := "garbage-"+strconv.Itoa(i), big
				if i%2 == 1 {
					tok = forge(i)
					if i%4 == 3 {
						body = small
					}
				}
				creds := grpc.PerRPCCredentials(oauth.TokenSource{TokenSource: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: tok})})
				err := conn.Invoke(e.ctx, "/nodeconfig.v1.CheckpointService/PutCheckpoint", body, &nodeconfigv1.PutCheckpointResponse{}, creds)
				codeCounts[w][status.Code(err)]++
				if i%2 == 1 && status.Code(err) == codes.Unauthenticated && strings.Contains(status.Convert(err).Message(), `signed by key "forged", which is not one of the cluster's ServiceAccount keys`) {
					refusedByKeys.Add(1)
				}
			}
		})
	}

	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.nodeConfig(e.label, map[string]any{
		"source":      map[string]any{"configMap": map[string]any{"namespace": e.ns, "name": "cfg", "key": "config.yaml"}},
		"soakSeconds": 1,
	}, nil)
	e.waitNode(n.Name, 90*time.Second, "promoted during the flood", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.LastKnownGood) == cm.ResourceVersion && reasonIs(c, "Active")
	})
	promotedAfter := time.Since(start)
	wg.Wait()
	elapsed := time.Since(start)
	if lkg := e.records(0).GetLastKnownGood().GetSource().GetResourceVersion(); lkg != cm.ResourceVersion {
		t.Fatalf("the node's own records say last-known-good %q, want %q", lkg, cm.ResourceVersion)
	}

	total := map[codes.Code]int{}
	for _, m := range codeCounts {
		for c, k := range m {
			total[c] += k
		}
	}
	if total[codes.OK] != 0 {
		t.Fatalf("%d flood calls succeeded: %v", total[codes.OK], total)
	}
	peak := vmHWM(t, n.Checkpointd.Pid())
	sent := reviews() - reviewsBefore
	// Two budgets (allowed identity, others) of burst 10 refilled at 5/s.
	bound := 2 * (10 + int(5*elapsed.Seconds()+1))
	t.Logf("flood: %d calls in %v (%v), rollout promoted after %v; agent peak RSS %.1f MiB (limit %d MiB); %d TokenReviews sent (bound %d)",
		calls, elapsed.Round(time.Millisecond), total, promotedAfter.Round(time.Millisecond), float64(peak)/(1<<20), agentMemoryLimit>>20, sent, bound)
	if peak >= agentMemoryLimit {
		t.Errorf("the agent's peak RSS %d MiB reached its %d MiB limit", peak>>20, agentMemoryLimit>>20)
	}
	// Without a budget every small-body forged call costs a review.
	if forgedSmall := calls / 4; sent > bound || sent >= forgedSmall/2 {
		t.Errorf("%d TokenReviews for %d flood calls (%d forged tokens with small bodies) in %v; the budget allows at most %d", sent, calls, forgedSmall, elapsed, bound)
	}

	// The agent checked signatures with the cluster's keys: it read them
	// from the API server (the audit log), and refused every forged token
	// for its key before review.
	jwksReads, err := audit.Count(auditLog, func(ev audit.Event) bool {
		return ev.Verb == "get" && strings.HasPrefix(ev.RequestURI, "/openid/v1/jwks") && ev.ResponseStatus.Code == 200 &&
			strings.HasPrefix(ev.UserAgent, "nodeconfig-checkpointd") && !ev.RequestReceived.Before(started)
	})
	if err != nil {
		t.Fatal(err)
	}
	if jwksReads == 0 {
		t.Errorf("the audit log shows no read of the cluster's signing keys (/openid/v1/jwks) by checkpointd")
	}
	if forged := int64(calls / 2); refusedByKeys.Load() != forged {
		t.Errorf("%d of %d forged tokens refused for a key that is not the cluster's; the agent did not verify with the cluster's keys (%v)", refusedByKeys.Load(), forged, total)
	}
	// So the only reviews are of the reconciler's own tokens for this
	// node, minted since it started, each at most once per review cache
	// period: counted after the reviews, every reviewed token's request is
	// in the log already.
	trs, err := audit.TokenRequests(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	minted := 0
	for _, tr := range trs {
		if tr.Account == "nodeconfig-system/"+reconcilerSA && tr.Code == 201 && slices.Contains(tr.Audiences, audienceOf(n.Name)) &&
			!tr.At.Before(reconcilerStarted) {
			minted++
		}
	}
	perToken := 1 + int(time.Since(reconcilerStarted)/authn.ReviewCacheTTL)
	t.Logf("the reconciler's tokens for %s: %d minted (audit log); the agent's TokenReviews: %d; the agent read the cluster's keys %d times",
		n.Name, minted, sent, jwksReads)
	if sent < 1 || sent > minted*perToken {
		t.Errorf("%d TokenReviews by the agent, want 1 to %d: one per token the reconciler minted for %s (%d, audit log) per %v review cache period",
			sent, minted*perToken, n.Name, minted, authn.ReviewCacheTTL)
	}
}

// vmHWM is a process's peak resident set size, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}
