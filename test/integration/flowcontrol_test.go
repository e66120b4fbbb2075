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
// agents' requests are classified into the priority level deploy/ gives them,
// and the reconciler's are not: the API server says which in each answer.
func TestAgentsHaveTheirOwnPriorityLevel(t *testing.T) {
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
	schema, err := c.Client.FlowcontrolV1().FlowSchemas().Get(ctx, "nodeconfig-agents", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	level, err := c.Client.FlowcontrolV1().PriorityLevelConfigurations().Get(ctx, "nodeconfig-agents", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	agent := tokenClient(ctx, t, c, "nodeconfig-agent", "n1")
	reconciler := tokenClient(ctx, t, c, "nodeconfig-reconciler", "")

	// The API server loads a new FlowSchema within seconds.
	var got classification
	if err := proc.WaitFor(30*time.Second, func() (bool, error) {
		got, err = classify(ctx, agent, http.MethodPatch, c.URL+"/api/v1/nodes/n1/status", `{"metadata":{"annotations":{"`+v1alpha1.NodeAnnotationConfigStatus+`":"{}"}}}`)
		return got.schema == schema.UID, err
	}); err != nil {
		t.Fatalf("the agent's status patch went to FlowSchema %q, want nodeconfig-agents (%s): %v", got.schema, schema.UID, err)
	}
	if got.code != http.StatusOK || got.level != level.UID {
		t.Fatalf("the agent's status patch: %d at priority level %q, want 200 at nodeconfig-agents (%s)", got.code, got.level, level.UID)
	}
	if got, err = classify(ctx, agent, http.MethodGet, c.URL+"/api/v1/nodes/n1", ""); err != nil || got.schema != schema.UID {
		t.Fatalf("the agent's read went to FlowSchema %q (%v), want nodeconfig-agents", got.schema, err)
	}
	if got, err = classify(ctx, reconciler, http.MethodGet, c.URL+"/api/v1/nodes", ""); err != nil || got.schema == "" || got.schema == schema.UID || got.level == level.UID {
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
	if body != "" {
		req.Header.Set("Content-Type", "application/strategic-merge-patch+json")
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
