package servingcert

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	certutil "k8s.io/client-go/util/cert"

	"nodeconfig.io/services/api/v1alpha1"
)

// issuingAPI is a fake API server whose every CSR is stored approved and
// signed by ca at once, as the reconciler would; requests are counted and
// the last one kept.
func issuingAPI(t *testing.T) (*fake.Clientset, *x509.Certificate, *atomic.Int64, *atomic.Pointer[certificatesv1.CertificateSigningRequest]) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "agents-ca"}, caKey)
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	var requests atomic.Int64
	var last atomic.Pointer[certificatesv1.CertificateSigningRequest]
	client.PrependReactor("create", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		csr := a.(k8stesting.CreateAction).GetObject().(*certificatesv1.CertificateSigningRequest).DeepCopy()
		n := requests.Add(1)
		csr.Name = csr.GenerateName + string(rune('a'+n))
		last.Store(csr.DeepCopy())
		block, _ := pem.Decode(csr.Spec.Request)
		req, err := x509.ParseCertificateRequest(block.Bytes)
		if err != nil {
			t.Error(err)
			return true, nil, err
		}
		der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
			SerialNumber: big.NewInt(n), Subject: pkix.Name{CommonName: req.Subject.CommonName}, DNSNames: req.DNSNames, IPAddresses: req.IPAddresses,
			NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}, ca, req.PublicKey, crypto.Signer(caKey))
		if err != nil {
			t.Error(err)
			return true, nil, err
		}
		csr.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue}}
		csr.Status.Certificate = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		// Stored as it is now, so the manager's watch finds it issued.
		if err := client.Tracker().Create(a.GetResource(), csr, ""); err != nil {
			return true, nil, err
		}
		return true, csr, nil
	})
	return client, ca, &requests, &last
}

// The agent asks the agents' signer for its node's name alone, serves
// from one file holding the pair, and on a restart with the pair still
// valid asks for nothing.
func TestNodeRequestsAndKeepsItsOwnCertificate(t *testing.T) {
	client, ca, requests, last := issuingAPI(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ips := []net.IP{net.ParseIP("10.0.0.1")}
	m, err := Start(Options{Kube: client, Node: "node-a", IPs: ips, Dir: dir, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Wait(ctx); err != nil {
		t.Fatalf("no certificate: %v", err)
	}
	m.Stop()
	csr := last.Load()
	if csr.Spec.SignerName != v1alpha1.AgentServingSigner || !slices.Contains(csr.Spec.Usages, certificatesv1.UsageServerAuth) {
		t.Fatalf("request to signer %q with usages %v", csr.Spec.SignerName, csr.Spec.Usages)
	}
	block, _ := pem.Decode(csr.Spec.Request)
	req, _ := x509.ParseCertificateRequest(block.Bytes)
	if req.Subject.CommonName != "node-a.agent.nodeconfig.io" || !slices.Equal(req.DNSNames, []string{"node-a.agent.nodeconfig.io"}) ||
		len(req.IPAddresses) != 1 || !req.IPAddresses[0].Equal(ips[0]) {
		t.Fatalf("asked for CN %q DNS %v IP %v, want node-a's name and its address", req.Subject.CommonName, req.DNSNames, req.IPAddresses)
	}
	if _, ok := req.PublicKey.(*ecdsa.PublicKey); !ok {
		t.Fatalf("key %T, want ECDSA", req.PublicKey)
	}

	// What servekit loads: --tls-cert-file and --tls-key-file both File(dir).
	pair, err := tls.LoadX509KeyPair(File(dir), File(dir))
	if err != nil {
		t.Fatalf("the pair in %s: %v", File(dir), err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "node-a.agent.nodeconfig.io"}); err != nil {
		t.Fatalf("the served certificate: %v", err)
	}

	// A restart (the container's; the volume stays) serves the pair kept.
	m, err = Start(Options{Kube: client, Node: "node-a", IPs: ips, Dir: dir, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("%d requests, want the one of the first start", n)
	}
}

// The node's name is required: a certificate names its node.
func TestStartNeedsTheNode(t *testing.T) {
	if _, err := Start(Options{Kube: fake.NewClientset(), Dir: t.TempDir(), Log: slog.New(slog.DiscardHandler)}); err == nil {
		t.Fatal("started without a node")
	}
}
