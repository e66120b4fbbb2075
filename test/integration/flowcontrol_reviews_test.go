package integration

import (
	"context"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/test/framework/cluster"
	"nodeconfig.io/test/framework/proc"
)

// The agents' reviews of their callers (the rollout's and the metrics
// ports') and their reads of the signing keys are classified into a
// priority level apart from their Node patches: a flood of either cannot
// queue the other.
func TestAgentReviewsHaveAPriorityLevelApartFromTheirPatches(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{Dir: t.TempDir(), PriorityAndFairness: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	root, err := proc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, "kubectl", "--kubeconfig", c.Kubeconfig, "apply", "-k", filepath.Join(root, "deploy")).CombinedOutput(); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	uids := func(name string) (schema, level types.UID) {
		t.Helper()
		s, err := c.Client.FlowcontrolV1().FlowSchemas().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.Client.FlowcontrolV1().PriorityLevelConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s.UID, l.UID
	}
	reviewSchema, reviewLevel := uids("nodeconfig-agent-reviews")
	agentSchema, agentLevel := uids("nodeconfig-agents")
	agent := tokenClient(ctx, t, c, "nodeconfig-agent", "n1")
	send := func(method, url, contentType, body string) classification {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := agent.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return classification{resp.StatusCode,
			types.UID(resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID")), types.UID(resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID"))}
	}
	tokenReview := func() classification {
		return send(http.MethodPost, c.URL+"/apis/authentication.k8s.io/v1/tokenreviews", "application/json",
			`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"not-a-token"}}`)
	}

	// The API server loads new FlowSchemas within seconds.
	var got classification
	if err := proc.WaitFor(30*time.Second, func() (bool, error) {
		got = tokenReview()
		return got.schema == reviewSchema, nil
	}); err != nil {
		t.Fatalf("the agent's TokenReview went to FlowSchema %q, want nodeconfig-agent-reviews (%s)", got.schema, reviewSchema)
	}
	for _, r := range []struct {
		what                      string
		method, path, ctype, body string
		schema, level             types.UID
	}{
		{"TokenReview", http.MethodPost, "/apis/authentication.k8s.io/v1/tokenreviews", "application/json",
			`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"not-a-token"}}`, reviewSchema, reviewLevel},
		{"SubjectAccessReview", http.MethodPost, "/apis/authorization.k8s.io/v1/subjectaccessreviews", "application/json",
			`{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"u","nonResourceAttributes":{"path":"/metrics","verb":"get"}}}`, reviewSchema, reviewLevel},
		{"read of the signing keys", http.MethodGet, "/openid/v1/jwks", "", "", reviewSchema, reviewLevel},
		{"status patch", http.MethodPatch, "/api/v1/nodes/n1/status", "application/strategic-merge-patch+json",
			`{"metadata":{"annotations":{"` + v1alpha1.NodeAnnotationConfigStatus + `":"{}"}}}`, agentSchema, agentLevel},
	} {
		got := send(r.method, c.URL+r.path, r.ctype, r.body)
		if got.code >= 300 || got.schema != r.schema || got.level != r.level {
			t.Errorf("the agent's %s: %d, FlowSchema %q, priority level %q; want 2xx in %q, %q", r.what, got.code, got.schema, got.level, r.schema, r.level)
		}
	}
}
