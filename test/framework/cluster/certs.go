package cluster

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"os"
	"path/filepath"
	"time"

	"nodeconfig.io/test/framework/pki"
)

// controlPlanePKI is the control plane's throwaway certificate authority and keys, made
// in pure Go so no openssl is needed.
type controlPlanePKI struct {
	caCert, caKey                    string
	serverCert, serverKey            string
	adminCert, adminKey              string
	saPub, saKey                     string
	caPEM, adminCertPEM, adminKeyPEM []byte
	ca                               *pki.Authority
}

func newPKI(dir string, serverIPs []net.IP) (*controlPlanePKI, error) {
	p := &controlPlanePKI{
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
	ca, err := pki.NewAuthority("nodeconfig-test-ca", 10*365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	p.ca = ca
	p.caPEM = pki.PEM("CERTIFICATE", ca.DER)
	if err := pki.WriteKeyPair(p.caCert, p.caKey, ca.DER, ca.Key()); err != nil {
		return nil, err
	}
	serverDER, serverKey, err := ca.Issue(2, pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth,
		append([]net.IP{net.ParseIP("127.0.0.1")}, serverIPs...), []string{"localhost", "kubernetes", "kubernetes.default.svc"})
	if err != nil {
		return nil, err
	}
	if err := pki.WriteKeyPair(p.serverCert, p.serverKey, serverDER, serverKey); err != nil {
		return nil, err
	}
	adminDER, adminKey, err := ca.Issue(3, pkix.Name{CommonName: "nodeconfig-admin", Organization: []string{"system:masters"}}, x509.ExtKeyUsageClientAuth, nil, nil)
	if err != nil {
		return nil, err
	}
	if err := pki.WriteKeyPair(p.adminCert, p.adminKey, adminDER, adminKey); err != nil {
		return nil, err
	}
	p.adminCertPEM = pki.PEM("CERTIFICATE", adminDER)
	p.adminKeyPEM, _ = os.ReadFile(p.adminKey)

	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.saPub, pki.PEM("PUBLIC KEY", pubDER), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.saKey, pki.PEM("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

// load reuses certificates from an earlier run in the same directory, so a
// restarted 'make run' keeps working kubeconfigs.
func (p *controlPlanePKI) load() bool {
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
	p.ca, err = pki.Load(p.caPEM, caKey)
	return err == nil
}

// ClientKubeconfig writes a kubeconfig at path for a fresh client
// certificate of user in groups (e.g. a kubelet's system:node:NAME in
// system:nodes), signed by the cluster's CA.
func (c *Cluster) ClientKubeconfig(path, user string, groups []string) error {
	der, key, err := c.pki.ca.Issue(time.Now().UnixNano(), pkix.Name{CommonName: user, Organization: groups}, x509.ExtKeyUsageClientAuth, nil, nil)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return c.writeKubeconfigFor(path, pki.PEM("CERTIFICATE", der), pki.PEM("EC PRIVATE KEY", keyDER))
}

// ServingCert writes a serving certificate and key signed by the cluster's
// CA for the given IPs (a kubelet's, which the API server verifies when it
// proxies logs).
func (c *Cluster) ServingCert(certPath, keyPath, commonName string, ips []net.IP) error {
	der, key, err := c.pki.ca.Issue(time.Now().UnixNano(), pkix.Name{CommonName: commonName}, x509.ExtKeyUsageServerAuth, ips, []string{commonName})
	if err != nil {
		return err
	}
	return pki.WriteKeyPair(certPath, keyPath, der, key)
}

// CAFile is the cluster CA's certificate, which signs every client and
// serving certificate of the control plane.
func (c *Cluster) CAFile() string { return c.pki.caCert }

// AdminCertFiles are the admin client certificate and key (system:masters).
func (c *Cluster) AdminCertFiles() (cert, key string) { return c.pki.adminCert, c.pki.adminKey }

// ServiceAccountKeyFile is the private key that signs ServiceAccount tokens.
func (c *Cluster) ServiceAccountKeyFile() string { return c.pki.saKey }
