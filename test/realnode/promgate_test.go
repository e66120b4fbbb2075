package realnode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeconfig.io/test/framework/nodeview"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/realnode"
)

// prometheusGate: a NodeConfig's Prometheus gate against a real Prometheus
// (Debian's), started here on loopback and scraping the agent's metrics on
// the node's address as the install's PodMonitor does (TLS with the agents'
// CA, a metrics reader's token). A query that returns a series rolls the
// trial back; an empty one lets it promote; a server out of reach holds
// the soak, blaming nothing, until the gate can run again.
func prometheusGate(ctx context.Context, t *testing.T, work string) {
	promURL := startPrometheus(ctx, t)
	waitPrometheusSeries(ctx, t, promURL, `up{job="nodeconfig-agent"} == 1`)

	gate := func(url, query string) {
		runReadmeCommand(ctx, t, work, fmt.Sprintf(`kubectl patch nodeconfig workers --type merge -p '{"spec":{"health":{"prometheus":{"url":%q,"query":%q}}}}'`, url, query))
	}
	gate(promURL, `up{job="nodeconfig-agent",node="$node"} == 1`)
	applyMaxPods(ctx, t, work, 61)
	waitStatus(ctx, t, "rolled back by the Prometheus gate", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return c.Reason == "HealthGateFailed" && strings.Contains(c.Message, "returned 1 series") && strings.Contains(c.Message, `instance="`+realnode.Gateway+`:9601"`)
	})
	waitKubeletMaxPods(ctx, t, 60)

	gate(promURL, `up{job="nodeconfig-agent",node="$node"} == 0`)
	promoted := applyMaxPods(ctx, t, work, 62)
	waitStatus(ctx, t, "maxPods 62 promoted past an empty query", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return nodeview.ResourceVersion(st.LastKnownGood) == promoted && c.Reason == "Active"
	})
	waitKubeletMaxPods(ctx, t, 62)

	closed, err := proc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	gate("http://"+closed, `up{job="nodeconfig-agent",node="$node"} == 0`)
	held := applyMaxPods(ctx, t, work, 63)
	waitStatus(ctx, t, "holding the soak while Prometheus is out of reach", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return nodeview.ResourceVersion(st.Active) == held && c.Reason == "WaitingForHealth" && strings.Contains(c.Message, "cannot be run")
	})
	// Watched through three times its 10 s soak: never promoted, never
	// blamed, while the kubelet runs it healthy (a hold is an absence, so
	// it is watched for a bounded time).
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		st, c, err := nodeview.Read(ctx, node.Cluster.Client, realnode.NodeName)
		if err != nil {
			t.Fatal(err)
		}
		if nodeview.ResourceVersion(st.LastKnownGood) == held || c.Status == corev1.ConditionFalse {
			t.Fatalf("with Prometheus out of reach: %+v %s %q; want the soak held, nothing promoted or blamed", st, c.Reason, c.Message)
		}
		time.Sleep(time.Second)
	}
	gate(promURL, `up{job="nodeconfig-agent",node="$node"} == 0`)
	waitStatus(ctx, t, "maxPods 63 promoted once Prometheus answers", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return nodeview.ResourceVersion(st.LastKnownGood) == held && c.Reason == "Active"
	})
	runReadmeCommand(ctx, t, work, `kubectl patch nodeconfig workers --type json -p '[{"op":"remove","path":"/spec/health"}]'`)
}

// startPrometheus runs Prometheus on loopback, scraping the agent's
// checkpointd metrics every 2 s, and returns its URL.
func startPrometheus(ctx context.Context, t *testing.T) string {
	t.Helper()
	client := node.Cluster.Client
	const reader = "nodeconfig-test-metrics-reader"
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: reader, Namespace: namespace}}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: reader}, Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: reader},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: reader},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: reader, Namespace: namespace}}}
	if _, err := client.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bg := context.Background()
		_ = client.RbacV1().ClusterRoleBindings().Delete(bg, reader, metav1.DeleteOptions{})
		_ = client.RbacV1().ClusterRoles().Delete(bg, reader, metav1.DeleteOptions{})
		_ = client.CoreV1().ServiceAccounts(namespace).Delete(bg, reader, metav1.DeleteOptions{})
	})
	tok, err := client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, reader, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := client.CoreV1().Secrets(namespace).Get(ctx, "nodeconfig-agent-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caFile, tokenFile := write("ca.crt", ca.Data["tls.crt"]), write("token", []byte(tok.Status.Token))
	config := write("prometheus.yml", fmt.Appendf(nil, `global: {scrape_interval: 2s, evaluation_interval: 2s}
scrape_configs:
  - job_name: nodeconfig-agent
    scheme: https
    tls_config: {ca_file: %s}
    authorization: {credentials_file: %s}
    static_configs: [{targets: ['%s:9601'], labels: {node: %s}}]
`, caFile, tokenFile, realnode.Gateway, realnode.NodeName))
	addr, err := proc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	p, err := proc.Start("prometheus", "prometheus", []string{"--config.file=" + config, "--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr}, filepath.Join(node.Logs, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(10 * time.Second) })
	return "http://" + addr
}

// waitPrometheusSeries waits until query returns a series: Prometheus up
// and scraping.
func waitPrometheusSeries(ctx context.Context, t *testing.T, promURL, query string) {
	t.Helper()
	err := proc.WaitFor(2*time.Minute, func() (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, promURL+"/api/v1/query?query="+url.QueryEscape(query), nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		var body struct {
			Data struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			return false, err
		}
		return len(body.Data.Result) > 0, fmt.Errorf("%s: no series yet", query)
	})
	if err != nil {
		t.Fatalf("Prometheus never scraped the agent: %v (see %s)", err, filepath.Join(node.Logs, "prometheus.log"))
	}
}
