package servekit

import (
	"crypto/tls"
	"fmt"
	"time"

	"google.golang.org/grpc/credentials/tls/certprovider"
	"google.golang.org/grpc/credentials/tls/certprovider/pemfile"
)

// certRefresh is how often the serving certificate is reread, so that a
// rotated Secret needs no restart.
const certRefresh = time.Minute

// watchKeyPair serves the certificate on disk through grpc's file-watching
// provider. The pair is loaded once here first: the provider would only
// keep waiting on a bad file, and a bad flag should stop the start.
func watchKeyPair(certFile, keyFile string) (certprovider.Provider, error) {
	if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
		return nil, fmt.Errorf("load --tls-cert-file/--tls-key-file: %w", err)
	}
	return pemfile.NewProvider(pemfile.Options{CertFile: certFile, KeyFile: keyFile, RefreshDuration: certRefresh})
}
