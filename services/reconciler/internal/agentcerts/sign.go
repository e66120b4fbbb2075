package agentcerts

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// backdate starts a certificate's validity before it is signed, so a node
// whose clock runs a little behind accepts it at once.
const backdate = 5 * time.Minute

// CA is the authority that signs the agents' certificates: its certificate
// and key as files (the Secret nodeconfig-agent-ca, mounted into the
// reconciler alone), read at each signature so a rotated Secret is used
// without a restart.
type CA struct {
	CertFile, KeyFile string
}

// load reads the authority; its certificate is the first of CertFile.
func (ca CA) load() (*x509.Certificate, crypto.Signer, error) {
	pair, err := tls.LoadX509KeyPair(ca.CertFile, ca.KeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("agent signer CA: %w", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, fmt.Errorf("agent signer CA %s: %w", ca.CertFile, err)
	}
	if !cert.IsCA || !cert.BasicConstraintsValid {
		return nil, nil, fmt.Errorf("agent signer CA %s is not a CA certificate", ca.CertFile)
	}
	key, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, nil, errors.New("agent signer CA key cannot sign")
	}
	return cert, key, nil
}

// Check reads the authority once, so a bad file stops the start.
func (ca CA) Check() error {
	_, _, err := ca.load()
	return err
}

// Sign issues req's certificate (PEM), valid from a little before now for
// life, and never past the CA's own end.
func (ca CA) Sign(req *Request, now time.Time, life time.Duration) ([]byte, error) {
	caCert, caKey, err := ca.load()
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(life)
	if notAfter.After(caCert.NotAfter) {
		notAfter = caCert.NotAfter
	}
	usage := x509.KeyUsageDigitalSignature
	if _, isRSA := req.CSR.PublicKey.(*rsa.PublicKey); isRSA {
		usage |= x509.KeyUsageKeyEncipherment
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: req.Name},
		DNSNames:     []string{req.Name},
		IPAddresses:  req.IPs,
		NotBefore:    now.Add(-backdate), NotAfter: notAfter,
		KeyUsage:              usage,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, req.CSR.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("sign node %s's certificate: %w", req.Node, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}
