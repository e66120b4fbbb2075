package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
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
// within the budget (the bound below holds either way).
func TestGarbageTokenFloodDoesNotStopARolloutNorExhaustTheAgent(t *testing.T) {
	const calls, workers = 2000, 8
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
