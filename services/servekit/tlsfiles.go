package servekit

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"
)

// keyPairReloader serves the certificate on disk, rereading it when the
// file changes so that a rotated Secret needs no restart.
type keyPairReloader struct {
	certFile, keyFile string
	mu                sync.Mutex
	modTime           time.Time
	cert              *tls.Certificate
}

func newKeyPairReloader(certFile, keyFile string) (*keyPairReloader, error) {
	k := &keyPairReloader{certFile: certFile, keyFile: keyFile}
	if _, err := k.get(nil); err != nil {
		return nil, err
	}
	return k, nil
}

func (k *keyPairReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	fi, err := os.Stat(k.certFile)
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil {
		if k.cert != nil {
			return k.cert, nil // mid-rotation: keep serving the old one
		}
		return nil, fmt.Errorf("--tls-cert-file: %w", err)
	}
	if k.cert != nil && fi.ModTime().Equal(k.modTime) {
		return k.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		if k.cert != nil {
			return k.cert, nil
		}
		return nil, fmt.Errorf("load --tls-cert-file/--tls-key-file: %w", err)
	}
	k.cert, k.modTime = &cert, fi.ModTime()
	return k.cert, nil
}
