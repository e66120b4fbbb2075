package pki

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"os"
	"path/filepath"
	"time"
)

// AgentTLS is the agents' serving certificate as the shipped manifests
// expect it in the nodeconfig-agent-tls Secret, one for every agent, naming
// the fixed service name (pod IPs are unknown ahead) and 127.0.0.1 for local
// runs: the CA, certificate and key an agent serves and a client trusts.
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
	ca, err := NewAuthority("nodeconfig-agent-ca", 24*time.Hour)
	if err != nil {
		return t, err
	}
	der, key, err := ca.Issue(2, pkix.Name{CommonName: t.ServerName}, x509.ExtKeyUsageServerAuth,
		[]net.IP{net.ParseIP("127.0.0.1")}, []string{t.ServerName})
	if err != nil {
		return t, err
	}
	if err := os.WriteFile(t.CAFile, PEM("CERTIFICATE", ca.DER), 0o600); err != nil {
		return t, err
	}
	return t, WriteKeyPair(t.CertFile, t.KeyFile, der, key)
}

// AgentCA is the authority that signs the agents' own serving
// certificates, as the reconciler holds it (the nodeconfig-agent-ca Secret's
// tls.crt and tls.key): the reconciler trusts CertFile and signs with both.
type AgentCA struct {
	CertFile, KeyFile string
}

// NewAgentCA writes a fresh agent CA into dir.
func NewAgentCA(dir string) (AgentCA, error) {
	c := AgentCA{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return c, err
	}
	ca, err := NewAuthority("nodeconfig-agent-ca", 24*time.Hour)
	if err != nil {
		return c, err
	}
	return c, WriteKeyPair(c.CertFile, c.KeyFile, ca.DER, ca.Key())
}
