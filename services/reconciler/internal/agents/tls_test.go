package agents

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// testCA issues serving certificates for the DNS names it is given.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agents-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *testCA) serving(t *testing.T, name string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// fakeAgent serves TLS with one certificate on loopback and records the
// authorization header of every call that reaches it.
type fakeAgent struct {
	nodeconfigv1.UnimplementedCheckpointServiceServer
	addr string
	mu   sync.Mutex
	auth []string
}

func (a *fakeAgent) GetRecords(ctx context.Context, _ *nodeconfigv1.GetRecordsRequest) (*nodeconfigv1.GetRecordsResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.auth = append(a.auth, strings.Join(md.Get("authorization"), ","))
	return &nodeconfigv1.GetRecordsResponse{}, nil
}

func (a *fakeAgent) calls() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.auth...)
}

func startFakeAgent(t *testing.T, cert tls.Certificate) *fakeAgent {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &fakeAgent{addr: lis.Addr().String()}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})))
	nodeconfigv1.RegisterCheckpointServiceServer(srv, a)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return a
}

// countingTokens mints fake tokens through a fake TokenRequest API and
// counts them per audience.
func countingTokens(t *testing.T) (*NodeTokens, *sync.Map) {
	t.Helper()
	client := fake.NewClientset()
	minted := &sync.Map{} // audience -> *atomic.Int64
	client.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		n, _ := minted.LoadOrStore(tr.Spec.Audiences[0], new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		tr.Status.Token = "token-for-" + tr.Spec.Audiences[0]
		tr.Status.ExpirationTimestamp = metav1.NewTime(time.Now().Add(time.Hour))
		return true, tr, nil
	})
	tokens, err := NewNodeTokens(client.CoreV1().ServiceAccounts("nodeconfig-system"), "nodeconfig-reconciler", "nodeconfig-agent/{node}", 16, TokenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tokens, minted
}

func mintedFor(minted *sync.Map, audience string) int64 {
	if n, ok := minted.Load(audience); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

// Each agent's certificate is checked for the name of the node dialled:
// node-a's agent, serving its own certificate, gets node-a's token; the
// same agent (or its certificate) answering at node-b's address fails the
// handshake, and no token for node-b is minted or sent.
func TestAgentServingAnotherNodesCertificateFailsBeforeAnyToken(t *testing.T) {
	ca := newTestCA(t)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	certA := ca.serving(t, "node-a.agent.nodeconfig.io")
	agentA := startFakeAgent(t, certA)
	impostor := startFakeAgent(t, certA) // A's certificate at B's address

	transport, err := Credentials(caFile, "{node}.agent.nodeconfig.io", true)
	if err != nil {
		t.Fatal(err)
	}
	tokens, minted := countingTokens(t)
	pool := New(Options{Static: map[string]string{"node-a": agentA.addr, "node-b": impostor.addr}, Transport: transport, Tokens: tokens})
	defer pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	a, releaseA, err := pool.For("node-a")
	if err != nil {
		t.Fatal(err)
	}
	defer releaseA()
	if _, err := a.GetRecords(ctx, &nodeconfigv1.GetRecordsRequest{}); err != nil {
		t.Fatalf("node-a serving its own certificate: %v", err)
	}
	if got := agentA.calls(); len(got) != 1 || got[0] != "Bearer token-for-nodeconfig-agent/node-a" {
		t.Fatalf("node-a's agent saw authorization %q, want node-a's token once", got)
	}

	b, releaseB, err := pool.For("node-b")
	if err != nil {
		t.Fatal(err)
	}
	defer releaseB()
	_, err = b.GetRecords(ctx, &nodeconfigv1.GetRecordsRequest{})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "node-b.agent.nodeconfig.io") {
		t.Fatalf("node-a's certificate at node-b's address: %v, want the handshake refused for want of node-b's name", err)
	}
	if got := impostor.calls(); len(got) != 0 {
		t.Fatalf("the impostor received %d calls (%q)", len(got), got)
	}
	if n := mintedFor(minted, "nodeconfig-agent/node-b"); n != 0 {
		t.Fatalf("%d tokens for node-b were minted for a connection that failed its handshake", n)
	}
	t.Logf("refused: %v", err)
}

// A fixed name (no {node}) is the shared certificate of an operator's own
// PKI: every agent is checked against that one name.
func TestFixedServerNameChecksTheSameNameForEveryNode(t *testing.T) {
	if got := ServerName("nodeconfig-agent.nodeconfig-system.svc", "node-a"); got != "nodeconfig-agent.nodeconfig-system.svc" {
		t.Fatalf("fixed name became %q", got)
	}
	if got := ServerName("{node}.agent.nodeconfig.io", "10.0.0.1"); got != "10.0.0.1.agent.nodeconfig.io" {
		t.Fatalf("per-node name %q", got)
	}
}
