// Package pki is a throwaway certificate authority for tests and local runs,
// made in pure Go so no openssl is needed, and the agents' serving
// certificate issued by one (AgentTLS).
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

// Authority signs certificates for fresh keys.
type Authority struct {
	DER                 []byte
	cert                *x509.Certificate
	key                 *ecdsa.PrivateKey
	notBefore, notAfter time.Time
}

// NewAuthority makes a CA valid for valid, starting an hour ago so clocks
// that differ a little still accept it.
func NewAuthority(commonName string, valid time.Duration) (*Authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	a := &Authority{key: key, notBefore: time.Now().Add(-time.Hour)}
	a.notAfter = a.notBefore.Add(valid)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: commonName},
		NotBefore: a.notBefore, NotAfter: a.notAfter,
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	if a.DER, err = x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key); err != nil {
		return nil, err
	}
	a.cert, err = x509.ParseCertificate(a.DER)
	return a, err
}

// Load reads back an authority written with WriteKeyPair(a.DER, its key).
func Load(certPEM, keyPEM []byte) (*Authority, error) {
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
	return &Authority{DER: cb.Bytes, cert: cert, key: key, notBefore: cert.NotBefore, notAfter: cert.NotAfter}, nil
}

// Key is the authority's private key, to write beside its certificate.
func (a *Authority) Key() *ecdsa.PrivateKey { return a.key }

// Issue signs a certificate for a fresh key, valid as long as the authority.
func (a *Authority) Issue(serial int64, subject pkix.Name, usage x509.ExtKeyUsage, ips []net.IP, dns []string) ([]byte, *ecdsa.PrivateKey, error) {
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

// WriteKeyPair writes a certificate and its EC key as PEM, readable only by
// their owner.
func WriteKeyPair(certPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(certPath, PEM("CERTIFICATE", der), 0o600); err != nil {
		return err
	}
	return os.WriteFile(keyPath, PEM("EC PRIVATE KEY", keyDER), 0o600)
}

// PEM encodes one block.
func PEM(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
