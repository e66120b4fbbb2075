package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"nodeconfig.io/services/checkpointd/internal/servingcert"
)

// servingCertFlags ask for the node's own serving certificate
// (internal/servingcert) instead of a certificate from files.
type servingCertFlags struct {
	dir  string
	node string
	ip   string
	// fs is the parsed flag set: the certificate's file becomes
	// --tls-cert-file and --tls-key-file there.
	fs *flag.FlagSet
}

func (f *servingCertFlags) register(fs *flag.FlagSet) {
	f.fs = fs
	fs.StringVar(&f.dir, "serving-cert-dir", "", "request this node's own serving certificate from the cluster (a CertificateSigningRequest the reconciler signs, naming --node-name alone), keep it with its key in this directory (memory-backed in the DaemonSet) and renew it before it expires; it is then --tls-cert-file and --tls-key-file, and nothing is served until it is issued (empty: --tls-cert-file and --tls-key-file, an operator's own)")
	fs.StringVar(&f.node, "node-name", "", "this node's name: the certificate of --serving-cert-dir carries it, and --health-gates watch its Node and its pods")
	fs.StringVar(&f.ip, "serving-cert-ip", "", "this agent's Pod's address, which the certificate of --serving-cert-dir carries too, for metrics scrapers that dial it by address (the reconciler signs it only if it is the Pod's; empty: the name alone)")
}

// ips is --serving-cert-ip as the certificate's addresses.
func (f *servingCertFlags) ips() ([]net.IP, error) {
	if f.ip == "" {
		return nil, nil
	}
	ip := net.ParseIP(f.ip)
	if ip == nil {
		return nil, fmt.Errorf("--serving-cert-ip %q is not an IP address", f.ip)
	}
	return []net.IP{ip}, nil
}

// enabled reports whether the node requests its own certificate.
func (f *servingCertFlags) enabled() bool { return f.dir != "" }

// useFile points --tls-cert-file and --tls-key-file at the pair the
// certificate manager keeps (one file holds both), before the server is
// built from them; naming other files with them is refused.
func (f *servingCertFlags) useFile() error {
	file := servingcert.File(f.dir)
	for _, name := range []string{"tls-cert-file", "tls-key-file"} {
		if v := f.fs.Lookup(name).Value.String(); v != "" && v != file {
			return fmt.Errorf("--serving-cert-dir serves the node's own certificate (%s): drop --%s %s", file, name, v)
		}
		if err := f.fs.Set(name, file); err != nil {
			return err
		}
	}
	return nil
}

// start begins requesting the certificate, with restCfg's identity (the
// agent's Pod-bound ServiceAccount token).
func (f *servingCertFlags) start(restCfg *rest.Config, reg prometheus.Registerer, log *slog.Logger) (*servingcert.Manager, error) {
	cfg := rest.CopyConfig(restCfg)
	// The request is waited on through a watch, which a client timeout
	// would cut.
	cfg.Timeout = 0
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ips, err := f.ips()
	if err != nil {
		return nil, err
	}
	return servingcert.Start(servingcert.Options{Kube: kube, Node: f.node, IPs: ips, Dir: f.dir, Registerer: reg, Log: log})
}

// awaitCertificate holds the start until the certificate is issued, or
// SIGTERM or SIGINT arrives (false).
func awaitCertificate(certs *servingcert.Manager) bool {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return certs.Wait(ctx) == nil
}
