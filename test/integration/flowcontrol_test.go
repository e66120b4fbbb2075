package integration

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/test/framework/cluster"
	"nodeconfig.io/test/framework/proc"
)

// With the API server's priority and fairness on, as clusters run it, the
// agents' requests (checkpointd's and statusd's) are classified into the
// priority levels deploy/ gives them, and the reconciler's are not: the
// API server says which in each answer. checkpointd's reviews of its
// callers (the rollout's and the metrics port's) and its reads of the
// signing keys have a level apart from the Node patches and reads, so a
// flood of either cannot queue the other.
func TestAgentsHaveTheirOwnPriorityLevels(t *testing.T) {
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
	agentSchema, agentLevel := uids("nodeconfig-agents")
	reviewSchema, reviewLevel := uids("nodeconfig-agent-reviews")
	agent := tokenClient(ctx, t, c, "nodeconfig-agent", "n1")
	status := tokenClient(ctx, t, c, "nodeconfig-status", "n1")
	reconciler := tokenClient(ctx, t, c, "nodeconfig-reconciler", "")
	const (
		tokenReview = `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"not-a-token"}}`
		statusPatch = `{"metadata":{"annotations":{"` + v1alpha1.NodeAnnotationConfigStatus + `":"{}"}}}`
	)

	// The API server loads new FlowSchemas within seconds.
	var got classification
	if err := proc.WaitFor(30*time.Second, func() (bool, error) {
		got, err = classify(ctx, agent, http.MethodPost, c.URL+"/apis/authentication.k8s.io/v1/tokenreviews", tokenReview)
		return got.schema == reviewSchema, err
	}); err != nil {
		t.Fatalf("the agent's TokenReview went to FlowSchema %q, want nodeconfig-agent-reviews (%s): %v", got.schema, reviewSchema, err)
	}
	for _, r := range []struct {
		who                      string
		as                       *http.Client
		what, method, path, body string
		schema, level            types.UID
	}{
		{"checkpointd", agent, "TokenReview", http.MethodPost, "/apis/authentication.k8s.io/v1/tokenreviews", tokenReview, reviewSchema, reviewLevel},
		{"checkpointd", agent, "SubjectAccessReview", http.MethodPost, "/apis/authorization.k8s.io/v1/subjectaccessreviews",
			`{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"u","nonResourceAttributes":{"path":"/metrics","verb":"get"}}}`, reviewSchema, reviewLevel},
		{"checkpointd", agent, "read of the signing keys", http.MethodGet, "/openid/v1/jwks", "", reviewSchema, reviewLevel},
		{"checkpointd", agent, "read of its Node", http.MethodGet, "/api/v1/nodes/n1", "", agentSchema, agentLevel},
		{"statusd", status, "status patch", http.MethodPatch, "/api/v1/nodes/n1/status", statusPatch, agentSchema, agentLevel},
		{"statusd", status, "read of its Node", http.MethodGet, "/api/v1/nodes/n1", "", agentSchema, agentLevel},
	} {
		got, err := classify(ctx, r.as, r.method, c.URL+r.path, r.body)
		if err != nil || got.code >= 300 || got.schema != r.schema || got.level != r.level {
			t.Errorf("%s's %s: %d, FlowSchema %q, priority level %q (%v); want 2xx in %q, %q", r.who, r.what, got.code, got.schema, got.level, err, r.schema, r.level)
		}
	}
	if got, err = classify(ctx, reconciler, http.MethodGet, c.URL+"/api/v1/nodes", ""); err != nil || got.schema == "" ||
		got.schema == agentSchema || got.level == agentLevel || got.schema == reviewSchema || got.level == reviewLevel {
		t.Fatalf("the reconciler's list went to FlowSchema %q, priority level %q (%v), want another than the agents'", got.schema, got.level, err)
	}
}

type classification struct {
	code          int
	schema, level types.UID
}

// classify sends one request and returns the FlowSchema and priority level
// the API server put it in.
func classify(ctx context.Context, client *http.Client, method, url, body string) (classification, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return classification{}, err
	}
	switch {
	case method == http.MethodPatch:
		req.Header.Set("Content-Type", "application/strategic-merge-patch+json")
	case body != "":
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return classification{}, err
	}
	defer resp.Body.Close()
	return classification{
		code:   resp.StatusCode,
		schema: types.UID(resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID")),
		level:  types.UID(resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID")),
	}, nil
}

// tokenClient is an HTTP client with a token of the install's ServiceAccount
// named account, bound to Node node if one is named (as a pod's projected token).
func tokenClient(ctx context.Context, t *testing.T, c *cluster.Cluster, account, node string) *http.Client {
	t.Helper()
	spec := authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(600))}
	if node != "" {
		spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: node}
	}
	tr, err := c.Client.CoreV1().ServiceAccounts("nodeconfig-system").CreateToken(ctx, account, &authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(fmt.Errorf("token of %s: %w", account, err))
	}
	cfg := rest.AnonymousClientConfig(c.Config)
	cfg.BearerToken = tr.Status.Token
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}
