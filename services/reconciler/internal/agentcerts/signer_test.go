package agentcerts

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"

	"nodeconfig.io/services/api/v1alpha1"
)

const agentUser = "system:serviceaccount:nodeconfig-system:nodeconfig-agent"

// writeCA writes a fresh CA's certificate and key and returns them with
// the certificate.
func writeCA(t *testing.T) (CA, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nodeconfig-agent-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca := CA{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}
	if err := os.WriteFile(ca.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ca.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return ca, cert
}

// request is a CSR object as the API server stores an agent's: requested
// by user, with node in its extra (none if ""), asking for names.
func request(t *testing.T, name, user, node string, cn string, dns []string, ips []net.IP) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := certutil.MakeCSR(key, &pkix.Name{CommonName: cn}, dns, ips)
	if err != nil {
		t.Fatal(err)
	}
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request: der, SignerName: v1alpha1.AgentServingSigner, Username: user,
			Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		},
	}
	if node != "" {
		csr.Spec.Extra = map[string]certificatesv1.ExtraValue{NodeNameExtra: {node}, PodNameExtra: {"agent-x"}, PodUIDExtra: {"uid-x"}}
	}
	return csr
}

func ownName(node string) string { return node + v1alpha1.AgentServingNameSuffix }

// Only the agents' ServiceAccount, with a token bound to a Pod on node N,
// asking for N's name alone, gets a certificate; every other request is
// refused with the reason.
func TestCheckSignsOnlyAnAgentsRequestForItsOwnNode(t *testing.T) {
	fit := request(t, "ok", agentUser, "node-a", ownName("node-a"), []string{ownName("node-a")}, nil)
	if req, refusal := Check(fit, agentUser); refusal != nil || req.Node != "node-a" || req.Name != "node-a.agent.nodeconfig.io" {
		t.Fatalf("an agent asking for its own node's name: %+v %v", req, refusal)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	weak, _ := certutil.MakeCSR(rsaKey, &pkix.Name{CommonName: ownName("node-a")}, []string{ownName("node-a")}, nil)
	for _, tc := range []struct {
		name   string
		change func(*certificatesv1.CertificateSigningRequest)
		reason string
	}{
		{"another node's name", func(c *certificatesv1.CertificateSigningRequest) {
			*c = *request(t, "x", agentUser, "node-a", ownName("node-b"), []string{ownName("node-b")}, nil)
		}, ReasonBadRequest},
		{"its own token on another node", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Extra[NodeNameExtra] = []string{"node-b"}
		}, ReasonBadRequest},
		{"another ServiceAccount", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Username = "system:serviceaccount:nodeconfig-system:intruder"
		}, ReasonNotAnAgent},
		{"the agent's name in another namespace", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Username = "system:serviceaccount:default:nodeconfig-agent"
		}, ReasonNotAnAgent},
		{"an admin", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Username = "kubernetes-admin" }, ReasonNotAnAgent},
		{"no node in the credentials", func(c *certificatesv1.CertificateSigningRequest) { delete(c.Spec.Extra, NodeNameExtra) }, ReasonNoNode},
		{"two nodes in the credentials", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Extra[NodeNameExtra] = []string{"node-a", "node-b"}
		}, ReasonNoNode},
		{"another signer", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "kubernetes.io/kubelet-serving" }, ReasonBadRequest},
		{"an extra DNS name", func(c *certificatesv1.CertificateSigningRequest) {
			*c = *request(t, "x", agentUser, "node-a", ownName("node-a"), []string{ownName("node-a"), ownName("node-b")}, nil)
		}, ReasonBadRequest},
		{"the bare node name", func(c *certificatesv1.CertificateSigningRequest) {
			*c = *request(t, "x", agentUser, "node-a", "node-a", []string{"node-a"}, nil)
		}, ReasonBadRequest},
		{"an IP address without its Pod in the credentials", func(c *certificatesv1.CertificateSigningRequest) {
			*c = *request(t, "x", agentUser, "node-a", ownName("node-a"), []string{ownName("node-a")}, []net.IP{net.ParseIP("10.0.0.2")})
			delete(c.Spec.Extra, PodUIDExtra)
		}, ReasonNoNode},
		{"client auth", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Usages = append(c.Spec.Usages, certificatesv1.UsageClientAuth)
		}, ReasonBadRequest},
		{"no server auth", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature}
		}, ReasonBadRequest},
		{"a 1024-bit RSA key", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Request = weak }, ReasonBadRequest},
		{"garbage", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Request = []byte("not PEM") }, ReasonBadRequest},
	} {
		c := fit.DeepCopy()
		tc.change(c)
		req, refusal := Check(c, agentUser)
		if refusal == nil || refusal.Reason != tc.reason {
			t.Errorf("%s: %+v, refusal %v; want refused with %s", tc.name, req, refusal, tc.reason)
		}
	}
}

// newSigner runs a Signer against a fake API server holding csrs.
func newSigner(t *testing.T, csrs ...*certificatesv1.CertificateSigningRequest) (*Signer, *fake.Clientset, *x509.Certificate) {
	t.Helper()
	ca, caCert := writeCA(t)
	client := fake.NewClientset()
	for _, c := range csrs {
		if _, err := client.CertificatesV1().CertificateSigningRequests().Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	client.ClearActions()
	s, err := New(Options{Kube: client, AgentNamespace: "nodeconfig-system", AgentName: "nodeconfig-agent", CA: ca, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return s, client, caCert
}

// writes lists the subresources written, in order.
func writes(client *fake.Clientset) []string {
	var out []string
	for _, a := range client.Actions() {
		if a.GetVerb() == "update" {
			out = append(out, a.GetSubresource())
		}
	}
	return out
}

func answer(t *testing.T, s *Signer, client *fake.Clientset, name string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	ctx := context.Background()
	csr, err := client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Answer(ctx, csr); err != nil {
		t.Fatal(err)
	}
	csr, err = client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return csr
}

// A fit request is approved through the approval subresource and signed
// through the status subresource: a certificate the CA verifies for the
// node's name alone, for server auth, valid no longer than asked.
func TestSignerApprovesAndSignsAnAgentsOwnName(t *testing.T) {
	fit := request(t, "agent-a", agentUser, "node-a", ownName("node-a"), []string{ownName("node-a")}, nil)
	fit.Spec.ExpirationSeconds = ptr.To[int32](3600)
	s, client, caCert := newSigner(t, fit)
	csr := answer(t, s, client, "agent-a")
	if got := writes(client); !slices.Equal(got, []string{"approval", "status"}) {
		t.Fatalf("writes %v, want approval then status", got)
	}
	if !hasCondition(csr, certificatesv1.CertificateApproved) || len(csr.Status.Certificate) == 0 {
		t.Fatalf("not approved and issued: %+v", csr.Status)
	}
	block, _ := pem.Decode(csr.Status.Certificate)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "node-a.agent.nodeconfig.io"}); err != nil {
		t.Fatalf("the issued certificate does not verify for node-a: %v", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "node-b.agent.nodeconfig.io"}); err == nil {
		t.Fatal("the issued certificate verifies for node-b")
	}
	if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) || len(cert.IPAddresses) != 0 || cert.IsCA {
		t.Fatalf("usages %v, IPs %v, CA %v: want server auth alone", cert.ExtKeyUsage, cert.IPAddresses, cert.IsCA)
	}
	if life := time.Until(cert.NotAfter); life > time.Hour || life < 50*time.Minute {
		t.Fatalf("valid for another %v, want the hour asked", life)
	}
	// Answered: a second look writes nothing.
	client.ClearActions()
	if err := s.Answer(context.Background(), csr); err != nil || len(writes(client)) != 0 {
		t.Fatalf("an issued request was answered again: %v %v", err, writes(client))
	}
}

// An unfit request is denied with its reason (the requester stops
// waiting); one someone else approved is marked failed, never signed; a
// request for another signer is left alone.
func TestSignerRefusesWhatItDoesNotSign(t *testing.T) {
	wrongNode := request(t, "wrong-node", agentUser, "node-a", ownName("node-b"), []string{ownName("node-b")}, nil)
	noNode := request(t, "no-node", agentUser, "", ownName("node-a"), []string{ownName("node-a")}, nil)
	approvedByAdmin := request(t, "approved-by-admin", "kubernetes-admin", "node-a", ownName("node-a"), []string{ownName("node-a")}, nil)
	approvedByAdmin.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue}}
	other := request(t, "other-signer", agentUser, "node-a", ownName("node-a"), []string{ownName("node-a")}, nil)
	other.Spec.SignerName = "example.com/other"
	s, client, _ := newSigner(t, wrongNode, noNode, approvedByAdmin, other)

	for _, tc := range []struct {
		name   string
		write  string
		result certificatesv1.RequestConditionType
		reason string
	}{
		{"wrong-node", "approval", certificatesv1.CertificateDenied, ReasonBadRequest},
		{"no-node", "approval", certificatesv1.CertificateDenied, ReasonNoNode},
		{"approved-by-admin", "status", certificatesv1.CertificateFailed, ReasonNotAnAgent},
	} {
		client.ClearActions()
		csr := answer(t, s, client, tc.name)
		if got := writes(client); !slices.Equal(got, []string{tc.write}) {
			t.Errorf("%s: writes %v, want %s alone", tc.name, got, tc.write)
		}
		if len(csr.Status.Certificate) != 0 {
			t.Errorf("%s: signed", tc.name)
		}
		var found bool
		for _, c := range csr.Status.Conditions {
			found = found || (c.Type == tc.result && c.Reason == tc.reason && c.Message != "")
		}
		if !found {
			t.Errorf("%s: conditions %+v, want %s with reason %s", tc.name, csr.Status.Conditions, tc.result, tc.reason)
		}
	}
	client.ClearActions()
	if csr := answer(t, s, client, "other-signer"); len(writes(client)) != 0 || len(csr.Status.Conditions) != 0 {
		t.Fatalf("another signer's request was touched: %v %+v", writes(client), csr.Status)
	}
}

// Run answers requests as they appear, through the informer.
func agentPodWith(node string, ips ...string) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-x", Namespace: "nodeconfig-system", UID: "uid-x"}, Spec: corev1.PodSpec{NodeName: node}}
	for _, ip := range ips {
		pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	return pod
}

// An address is signed only when it is the requester's Pod's, on the node
// it asks for (as scrapers dial the agent's metrics port by address); a
// Pod with no address yet is asked again later, not refused.
func TestSignerSignsOnlyThePodsOwnAddresses(t *testing.T) {
	withIP := func(name, ip string) *certificatesv1.CertificateSigningRequest {
		return request(t, name, agentUser, "node-a", ownName("node-a"), []string{ownName("node-a")}, []net.IP{net.ParseIP(ip)})
	}
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		ip     string
		reason string // "": issued
	}{
		{"its own address", agentPodWith("node-a", "10.0.0.1", "fd00::1"), "10.0.0.1", ""},
		{"its own IPv6 address", agentPodWith("node-a", "10.0.0.1", "fd00::1"), "fd00::1", ""},
		{"another address", agentPodWith("node-a", "10.0.0.1"), "10.0.0.2", ReasonBadRequest},
		{"a Pod on another node", agentPodWith("node-b", "10.0.0.1"), "10.0.0.1", ReasonNoNode},
		{"a Pod gone", nil, "10.0.0.1", ReasonNoNode},
	} {
		s, client, _ := newSigner(t, withIP("r", tc.ip))
		if tc.pod != nil {
			if _, err := client.CoreV1().Pods("nodeconfig-system").Create(context.Background(), tc.pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		csr := answer(t, s, client, "r")
		switch {
		case tc.reason == "" && len(csr.Status.Certificate) == 0:
			t.Errorf("%s: not issued: %+v", tc.name, csr.Status.Conditions)
		case tc.reason == "" && tc.ip != "":
			block, _ := pem.Decode(csr.Status.Certificate)
			cert, _ := x509.ParseCertificate(block.Bytes)
			if len(cert.IPAddresses) != 1 || !cert.IPAddresses[0].Equal(net.ParseIP(tc.ip)) {
				t.Errorf("%s: certificate for %v", tc.name, cert.IPAddresses)
			}
		case tc.reason != "" && (len(csr.Status.Certificate) != 0 || len(csr.Status.Conditions) != 1 || csr.Status.Conditions[0].Reason != tc.reason):
			t.Errorf("%s: %+v, want denied with %s", tc.name, csr.Status.Conditions, tc.reason)
		}
	}

	s, client, _ := newSigner(t, withIP("early", "10.0.0.1"))
	if _, err := client.CoreV1().Pods("nodeconfig-system").Create(context.Background(), agentPodWith("node-a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	csr, _ := client.CertificatesV1().CertificateSigningRequests().Get(context.Background(), "early", metav1.GetOptions{})
	if err := s.Answer(context.Background(), csr); err == nil || len(writes(client)) != 0 {
		t.Fatalf("a Pod with no address yet: err %v, writes %v; want an error to retry and no answer", err, writes(client))
	}
}

func TestSignerRunIssuesRequestsAsTheyCome(t *testing.T) {
	s, client, _ := newSigner(t)
	// The fake API server ignores field selectors: the signer must still
	// leave another signer's request alone.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	other := request(t, "other", agentUser, "node-a", ownName("node-a"), []string{ownName("node-a")}, nil)
	other.Spec.SignerName = "example.com/other"
	for _, c := range []*certificatesv1.CertificateSigningRequest{
		other, request(t, "agent-a", agentUser, "node-a", ownName("node-a"), []string{ownName("node-a")}, nil),
	} {
		if _, err := client.CertificatesV1().CertificateSigningRequests().Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var last *certificatesv1.CertificateSigningRequest
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		last, err = client.CertificatesV1().CertificateSigningRequests().Get(ctx, "agent-a", metav1.GetOptions{})
		return err == nil && len(last.Status.Certificate) > 0, nil
	})
	if err != nil {
		t.Fatalf("agent-a's request not issued: %v; last %+v", err, last)
	}
	for _, a := range client.Actions() {
		if u, ok := a.(k8stesting.UpdateAction); ok && a.GetVerb() == "update" && strings.Contains(u.GetObject().(*certificatesv1.CertificateSigningRequest).Name, "other") {
			t.Fatalf("another signer's request was written: %v", a)
		}
	}
}
