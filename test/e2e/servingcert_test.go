package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate/csr"
	"k8s.io/utils/ptr"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/test/framework/audit"
	"nodeconfig.io/test/framework/pki"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/framework/sim"
	"nodeconfig.io/test/framework/testenv"
)

// agentSA is the agents' ServiceAccount, as deploy/ names it.
const agentSA = "nodeconfig-agent"

// nodeNameExtra is what the API server adds to a request made with a token
// bound to a Pod on a node.
const nodeNameExtra = "authentication.kubernetes.io/node-name"

// agentServingName is the name node's agent certificate carries.
func agentServingName(node string) string { return node + v1alpha1.AgentServingNameSuffix }

// grantAgentAccount makes the agents' ServiceAccount and grants it what
// deploy/rbac.yaml grants it for its certificate and its callers' reviews.
func (e *env) grantAgentAccount() {
	e.t.Helper()
	if err := sim.EnsureNamespace(e.ctx, e.c, "nodeconfig-system"); err != nil {
		e.t.Fatal(err)
	}
	c := e.c.Client
	for _, sa := range []string{agentSA, reconcilerSA} {
		_, err := c.CoreV1().ServiceAccounts("nodeconfig-system").Create(e.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			e.t.Fatal(err)
		}
	}
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: agentSA, Namespace: "nodeconfig-system"}}
	objects := []func() error{
		func() error {
			_, err := c.RbacV1().ClusterRoles().Create(e.ctx, &rbacv1.ClusterRole{
				ObjectMeta: metav1.ObjectMeta{Name: "e2e-nodeconfig-agent-certificate"},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"},
					Verbs: []string{"create", "get", "list", "watch"}}},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.RbacV1().ClusterRoleBindings().Create(e.ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "e2e-nodeconfig-agent-certificate"}, Subjects: subject,
				RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "e2e-nodeconfig-agent-certificate"},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.RbacV1().ClusterRoleBindings().Create(e.ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "e2e-nodeconfig-agent-auth-delegator"}, Subjects: subject,
				RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:auth-delegator"},
			}, metav1.CreateOptions{})
			return err
		},
	}
	for _, create := range objects {
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			e.t.Fatal(err)
		}
	}
}

// agentKubeconfig gives node's agent the credentials its Pod would have:
// a Pod of the agents' ServiceAccount bound to the node (no kubelet runs
// it), and a kubeconfig with a token bound to that Pod, which makes the
// API server add the node's name to every request made with it.
func (e *env) agentKubeconfig(node string) string {
	e.t.Helper()
	pods := e.c.Client.CoreV1().Pods("nodeconfig-system")
	pod, err := pods.Create(e.ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-" + node},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: agentSA,
			Containers: []corev1.Container{{Name: "checkpointd", Image: "nodeconfig/checkpointd"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = pods.Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	// Its address, as its node's kubelet would report it (the host's, on
	// the host network).
	pod.Status.PodIP, pod.Status.PodIPs = "127.0.0.1", []corev1.PodIP{{IP: "127.0.0.1"}}
	if pod, err = pods.UpdateStatus(e.ctx, pod, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	tr, err := e.c.Client.CoreV1().ServiceAccounts("nodeconfig-system").CreateToken(e.ctx, agentSA, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	path := filepath.Join(e.root, "agent-"+node+".kubeconfig")
	if err := e.c.TokenKubeconfig(path, tr.Status.Token); err != nil {
		e.t.Fatal(err)
	}
	return path
}

// agentCSRs lists the agents' certificate requests made for node.
func (e *env) agentCSRs(node string) []certificatesv1.CertificateSigningRequest {
	e.t.Helper()
	list, err := e.c.Client.CertificatesV1().CertificateSigningRequests().List(e.ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.signerName", v1alpha1.AgentServingSigner).String(),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return slices.DeleteFunc(list.Items, func(c certificatesv1.CertificateSigningRequest) bool {
		return !slices.Equal(c.Spec.Extra[nodeNameExtra], []string{node})
	})
}

// peerNames are the DNS names of the certificate served at addr, which
// verifies for addr's IP address against roots (as a metrics scraper
// dials the agent).
func peerNames(t *testing.T, addr string, roots *x509.CertPool) []string {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: roots, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatalf("TLS to %s by its address: %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].DNSNames
}

// The agents get certificates naming their nodes (and their Pods'
// addresses) from the reconciler, through real CertificateSigningRequests
// made with their Pod-bound tokens, and a rollout over TLS with per-node
// tokens goes through. Node A's agent answering at node C's address (as
// ARP spoofing would have it) fails the reconciler's handshake, and no
// token for C is ever minted; A's agent asking for B's name is denied.
func TestAgentsServeTheirOwnNodesCertificate(t *testing.T) {
	e := newNodes(t, 0, nil)
	e.grantAgentAccount()
	ca, err := pki.NewAgentCA(filepath.Join(e.root, "agent-ca"))
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := e.label+"-a", e.label+"-b", e.label+"-c"
	addr := map[string]string{}
	for _, n := range []string{a, b} {
		if addr[n], err = proc.FreeAddr(); err != nil {
			t.Fatal(err)
		}
	}
	// C has no agent of its own: its address is A's agent.
	addr[c] = addr[a]
	labels := map[string]map[string]string{a: {"e2e": e.label}, b: {"e2e": e.label}, c: {"e2e": e.label + "-c"}}
	for _, n := range []string{a, b, c} {
		l := map[string]string{"kubernetes.io/hostname": n}
		for k, v := range labels[n] {
			l[k] = v
		}
		if _, err := e.c.Client.CoreV1().Nodes().Create(e.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: l}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = e.c.Client.CoreV1().Nodes().Delete(context.Background(), c, metav1.DeleteOptions{})
		for _, n := range []string{a, b} {
			for _, r := range e.agentCSRs(n) {
				_ = e.c.Client.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), r.Name, metav1.DeleteOptions{})
			}
		}
	})

	args := []string{"--agent-ca-file", ca.CertFile, "--agent-signer-key-file", ca.KeyFile,
		"--agent-service-account", "nodeconfig-system/" + agentSA,
		"--agent-token-audience", agentAudience, "--agent-token-service-account", "nodeconfig-system/" + reconcilerSA}
	for _, n := range []string{a, b, c} {
		args = append(args, "--agent-address", n+"="+addr[n])
	}
	e.startReconciler("r0", args...)
	start := time.Now()
	for _, n := range []string{a, b} {
		e.nodes = append(e.nodes, testenv.StartNode(t, e.c, e.root, n, sim.NodeOptions{
			Labels: labels[n], CheckpointdAddr: addr[n],
			CheckpointdArgs: []string{"--kubeconfig", e.agentKubeconfig(n), "--auth=token", "--auth-audience", agentAudience,
				"--serving-cert-dir", filepath.Join(e.root, "nodes", n, "tls"), "--node-name", "{node}", "--serving-cert-ip", "127.0.0.1"},
		}))
	}
	t.Logf("both agents served with their own certificates %v after the reconciler started", time.Since(start).Round(time.Millisecond))
	caPEM, err := os.ReadFile(ca.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	for _, n := range []string{a, b} {
		if got := peerNames(t, addr[n], roots); !slices.Equal(got, []string{agentServingName(n)}) {
			t.Fatalf("%s's agent serves a certificate for %v, want %s alone", n, got, agentServingName(n))
		}
		reqs := e.agentCSRs(n)
		if len(reqs) != 1 || reqs[0].Spec.Username != "system:serviceaccount:nodeconfig-system:"+agentSA || len(reqs[0].Status.Certificate) == 0 {
			t.Fatalf("%s's certificate requests: %+v, want one of the agents' ServiceAccount, issued", n, reqs)
		}
	}

	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(1)})
	e.use(e.label+"-c", "cfg", map[string]any{"nodeSelector": map[string]any{"matchLabels": labels[c]}})
	for _, n := range []string{a, b} {
		e.waitNode(n, 30*time.Second, "promoted over TLS with its own certificate", func(st corev1.NodeConfigStatus, cond *corev1.NodeCondition) bool {
			return rv(st.LastKnownGood) == cm.ResourceVersion && reasonIs(cond, "Active")
		})
	}

	// C, dialled at A's agent, fails at the handshake, again and again.
	var last string
	err = proc.WaitFor(30*time.Second, func() (bool, error) {
		st := e.nodeState(c)
		last = st.GetError()
		return strings.Contains(last, "certificate is valid for "+agentServingName(a)+", not "+agentServingName(c)) && st.GetFailures() >= 3, nil
	})
	if err != nil {
		t.Fatalf("node %s at %s's agent: %v; last error %q", c, a, err, last)
	}
	t.Logf("%s refused: %s", c, last)
	if _, ok := e.nodes[0].Target(); !ok {
		t.Fatalf("%s's config file is gone", a)
	}
	trs, err := audit.TokenRequests(filepath.Join(e.c.Dir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	minted := map[string]int{}
	for _, tr := range trs {
		for _, aud := range tr.Audiences {
			minted[aud]++
		}
	}
	if minted[audienceOf(c)] != 0 || minted[audienceOf(a)] == 0 {
		t.Fatalf("tokens minted for %s: %d, for %s: %d; want none for the node whose handshake failed", c, minted[audienceOf(c)], a, minted[audienceOf(a)])
	}

	// A's agent, with its own Pod's token, asking for B's name: denied.
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(e.root, "agent-"+a+".kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	asA, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := certutil.MakeCSR(key, &pkix.Name{CommonName: agentServingName(b)}, []string{agentServingName(b)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	name, uid, err := csr.RequestCertificate(asA, der, "", v1alpha1.AgentServingSigner, nil,
		[]certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}, key)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	if _, err := csr.WaitForCertificate(ctx, asA, name, uid); err == nil || !strings.Contains(err.Error(), "denied") || !strings.Contains(err.Error(), "RequestNotForOwnNode") {
		t.Fatalf("%s's agent asking for %s's name: %v, want it denied", a, b, err)
	}
}
