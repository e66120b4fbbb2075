package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the control plane's throwaway certificate authority and keys, made
// in pure Go so no openssl is needed.
type pki struct {
	caCert, caKey                    string
	serverCert, serverKey            string
	adminCert, adminKey              string
	saPub, saKey                     string
	caPEM, adminCertPEM, adminKeyPEM []byte
	ca                               *authority
}

func newPKI(dir string, serverIPs []net.IP) (*pki, error) {
	p := &pki{
		caCert: filepath.Join(dir, "ca.crt"), caKey: filepath.Join(dir, "ca.key"),
		serverCert: filepath.Join(dir, "apiserver.crt"), serverKey: filepath.Join(dir, "apiserver.key"),
		adminCert: filepath.Join(dir, "admin.crt"), adminKey: filepath.Join(dir, "admin.key"),
		saPub: filepath.Join(dir, "sa.pub"), saKey: filepath.Join(dir, "sa.key"),
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if p.load() {
		return p, nil
	}
	ca, err := newAuthority("nodeconfig-test-ca", 10*365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	p.ca = ca
	p.caPEM = pemBlock("CERTIFICATE", ca.der)
	if err := writeKeyPair(p.caCert, p.caKey, ca.der, ca.key); err != nil {
		return nil, err
	}
	serverDER, serverKey, err := ca.issue(2, pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth,
		append([]net.IP{net.ParseIP("127.0.0.1")}, serverIPs...), []string{"localhost", "kubernetes", "kubernetes.default.svc"})
	if err != nil {
		return nil, err
	}
	if err := writeKeyPair(p.serverCert, p.serverKey, serverDER, serverKey); err != nil {
		return nil, err
	}
	adminDER, adminKey, err := ca.issue(3, pkix.Name{CommonName: "nodeconfig-admin", Organization: []string{"system:masters"}}, x509.ExtKeyUsageClientAuth, nil, nil)
	if err != nil {
		return nil, err
	}
	if err := writeKeyPair(p.adminCert, p.adminKey, adminDER, adminKey); err != nil {
		return nil, err
	}
	p.adminCertPEM = pemBlock("CERTIFICATE", adminDER)
	p.adminKeyPEM, _ = os.ReadFile(p.adminKey)

	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.saPub, pemBlock("PUBLIC KEY", pubDER), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.saKey, pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

func writeKeyPair(certPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(certPath, pemBlock("CERTIFICATE", der), 0o600); err != nil {
		return err
	}
	return os.WriteFile(keyPath, pemBlock("EC PRIVATE KEY", keyDER), 0o600)
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// load reuses certificates from an earlier run in the same directory, so a
// restarted 'make run' keeps working kubeconfigs.
func (p *pki) load() bool {
	var err error
	read := func(path string) []byte {
		if err != nil {
			return nil
		}
		var b []byte
		b, err = os.ReadFile(path)
		return b
	}
	p.caPEM = read(p.caCert)
	p.adminCertPEM = read(p.adminCert)
	p.adminKeyPEM = read(p.adminKey)
	caKey := read(p.caKey)
	for _, f := range []string{p.serverCert, p.serverKey, p.saPub, p.saKey} {
		read(f)
	}
	if err != nil {
		return false
	}
	p.ca, err = loadAuthority(p.caPEM, caKey)
	return err == nil
}

// loadAuthority reads back an authority written by writeKeyPair.
func loadAuthority(certPEM, keyPEM []byte) (*authority, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, fmt.Errorf("no PEM block")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, err
	}
	return &authority{der: cb.Bytes, cert: cert, key: key, notBefore: cert.NotBefore, notAfter: cert.NotAfter}, nil
}

// ClientKubeconfig writes a kubeconfig at path for a fresh client
// certificate of user in groups (e.g. a kubelet's system:node:NAME in
// system:nodes), signed by the cluster's CA.
func (c *Cluster) ClientKubeconfig(path, user string, groups []string) error {
	der, key, err := c.pki.ca.issue(time.Now().UnixNano(), pkix.Name{CommonName: user, Organization: groups}, x509.ExtKeyUsageClientAuth, nil, nil)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return c.writeKubeconfigFor(path, pemBlock("CERTIFICATE", der), pemBlock("EC PRIVATE KEY", keyDER))
}

// ServingCert writes a serving certificate and key signed by the cluster's
// CA for the given IPs (a kubelet's, which the API server verifies when it
// proxies logs).
func (c *Cluster) ServingCert(certPath, keyPath, commonName string, ips []net.IP) error {
	der, key, err := c.pki.ca.issue(time.Now().UnixNano(), pkix.Name{CommonName: commonName}, x509.ExtKeyUsageServerAuth, ips, []string{commonName})
	if err != nil {
		return err
	}
	return writeKeyPair(certPath, keyPath, der, key)
}

// CAFile is the cluster CA's certificate, which signs every client and
// serving certificate of the control plane.
func (c *Cluster) CAFile() string { return c.pki.caCert }

// AdminCertFiles are the admin client certificate and key (system:masters).
func (c *Cluster) AdminCertFiles() (cert, key string) { return c.pki.adminCert, c.pki.adminKey }

// ServiceAccountKeyFile is the private key that signs ServiceAccount tokens.
func (c *Cluster) ServiceAccountKeyFile() string { return c.pki.saKey }

// AgentTLS is a CA and one serving certificate for every agent, as the
// shipped manifests expect them in the nodeconfig-agent-tls Secret: the
// certificate names the fixed service name (pod IPs are unknown ahead) and
// 127.0.0.1 for local runs.
type AgentTLS struct {
	CAFile, CertFile, KeyFile string
	ServerName                string
}

// NewAgentTLS writes a fresh agent CA and certificate into dir.
func NewAgentTLS(dir string) (AgentTLS, error) {
	t := AgentTLS{
		CAFile: filepath.Join(dir, "ca.crt"), CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"),
		ServerName: "nodeconfig-agent.nodeconfig-system.svc",
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return t, err
	}
	ca, err := newAuthority("nodeconfig-agent-ca", 24*time.Hour)
	if err != nil {
		return t, err
	}
	der, key, err := ca.issue(2, pkix.Name{CommonName: t.ServerName}, x509.ExtKeyUsageServerAuth,
		[]net.IP{net.ParseIP("127.0.0.1")}, []string{t.ServerName})
	if err != nil {
		return t, err
	}
	if err := os.WriteFile(t.CAFile, pemBlock("CERTIFICATE", ca.der), 0o600); err != nil {
		return t, err
	}
	return t, writeKeyPair(t.CertFile, t.KeyFile, der, key)
}

// authority is a throwaway certificate authority, made in pure Go.
type authority struct {
	der                 []byte
	cert                *x509.Certificate
	key                 *ecdsa.PrivateKey
	notBefore, notAfter time.Time
}

func newAuthority(commonName string, valid time.Duration) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	a := &authority{key: key, notBefore: time.Now().Add(-time.Hour)}
	a.notAfter = a.notBefore.Add(valid)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: commonName},
		NotBefore: a.notBefore, NotAfter: a.notAfter,
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	if a.der, err = x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key); err != nil {
		return nil, err
	}
	a.cert, err = x509.ParseCertificate(a.der)
	return a, err
}

// issue signs a certificate for a fresh key, valid as long as the authority.
func (a *authority) issue(serial int64, subject pkix.Name, usage x509.ExtKeyUsage, ips []net.IP, dns []string) ([]byte, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: subject,
		NotBefore: a.notBefore, NotAfter: a.notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: ips, DNSNames: dns,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	return der, key, err
}
