package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"nodeconfig.io/test/framework/cluster"
	"nodeconfig.io/test/framework/pki"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/framework/sim"
)

// The agent's metrics port is on the node's address (host network): with
// --metrics-auth=token it serves /metrics over TLS only to a bearer token
// whose user RBAC allows to get /metrics, as the kubelet does; /healthz
// stays open for probes.
func TestAgentMetricsNeedATokenAllowedToGetThem(t *testing.T) {
	metricsAddr, err := proc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	agentTLS, err := pki.NewAgentTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	e := newNodes(t, 1, func(int) sim.NodeOptions {
		return sim.NodeOptions{CheckpointdArgs: []string{"--kubeconfig", cluster.Shared.Kubeconfig,
			"--metrics-addr", metricsAddr, "--metrics-auth=token", "--tls-cert-file", agentTLS.CertFile, "--tls-key-file", agentTLS.KeyFile}}
	})
	const ns = "nodeconfig-metrics-test"
	if err := sim.EnsureNamespace(e.ctx, e.c, ns); err != nil {
		t.Fatal(err)
	}
	rbac := e.c.Client.RbacV1()
	for _, sa := range []string{"reader", "nobody"} {
		if _, err := e.c.Client.CoreV1().ServiceAccounts(ns).Create(e.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "nodeconfig-test-metrics-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	if _, err := rbac.ClusterRoles().Create(e.ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "nodeconfig-test-metrics-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "reader"}}}
	if _, err := rbac.ClusterRoleBindings().Create(e.ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = rbac.ClusterRoleBindings().Delete(e.ctx, binding.Name, metav1.DeleteOptions{})
		_ = rbac.ClusterRoles().Delete(e.ctx, role.Name, metav1.DeleteOptions{})
	})
	token := func(sa string) string {
		tr, err := e.c.Client.CoreV1().ServiceAccounts(ns).CreateToken(e.ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	ca, err := os.ReadFile(agentTLS.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: agentTLS.ServerName}}}
	get := func(path, bearer string) (int, string) {
		req, err := http.NewRequestWithContext(e.ctx, http.MethodGet, "https://"+metricsAddr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	if err := proc.WaitFor(30*time.Second, func() (bool, error) {
		code, body := get("/healthz", "")
		return code == http.StatusOK, fmt.Errorf("/healthz without a token: %d %s", code, body)
	}); err != nil {
		t.Fatal(err)
	}
	if code, body := get("/metrics", ""); code != http.StatusUnauthorized {
		t.Fatalf("/metrics without a token: %d, want 401: %s", code, body)
	}
	if code, body := get("/metrics", token("nobody")); code != http.StatusForbidden {
		t.Fatalf("/metrics with the token of a user RBAC does not allow: %d, want 403: %s", code, body)
	}
	// RBAC reaches the API server's authorizer through its informers.
	reader := token("reader")
	if err := proc.WaitFor(30*time.Second, func() (bool, error) {
		code, body := get("/metrics", reader)
		return code == http.StatusOK, fmt.Errorf("/metrics with the reader's token: %d %.200s", code, body)
	}); err != nil {
		t.Fatal(err)
	}
	plain := &http.Client{Timeout: 5 * time.Second}
	if resp, err := plain.Get("http://" + metricsAddr + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("/metrics answered in clear text")
		}
	}
}
