// Package servingcert gets the agent its serving certificate from the
// cluster: a key made here, a CertificateSigningRequest to the signer
// nodeconfig.io/agent-serving for this node's name alone, which the
// reconciler approves and signs, renewed before it expires. It is
// client-go's certificate manager, the kubelet's own for its serving
// certificate, with the pair kept in one file the TLS listeners reread.
package servingcert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/certificate"

	"nodeconfig.io/services/api/v1alpha1"
)

// pairPrefix names the files in the directory: agent-serving-current.pem
// (a link to the newest pair) and one agent-serving-TIMESTAMP.pem per pair.
const pairPrefix = "agent-serving"

// File is the PEM file in dir that holds the current certificate and its
// key, for --tls-cert-file and --tls-key-file both.
func File(dir string) string {
	return filepath.Join(dir, pairPrefix+"-current.pem")
}

// Name is the one DNS name node's agent certificate carries.
func Name(node string) string { return node + v1alpha1.AgentServingNameSuffix }

// Options say whose certificate to request and where to keep it.
type Options struct {
	// Kube creates and watches the request, as the agent's ServiceAccount
	// with its Pod-bound token: the API server adds the node to it, and
	// the reconciler signs only for that node.
	Kube kubernetes.Interface
	Node string
	// IPs are the agent's own addresses (its Pod's), for scrapers that
	// dial its metrics port by address; the reconciler checks the name.
	IPs []net.IP
	// Dir keeps the pair (a memory-backed volume: the key is never on
	// disk).
	Dir        string
	Registerer prometheus.Registerer // nil: no metrics
	Log        *slog.Logger
}

// Manager holds the current certificate and renews it in the background.
type Manager struct {
	m    certificate.Manager
	node string
	log  *slog.Logger
}

// Start loads the pair kept in Dir, if any is still valid, and requests a
// new one in the background when there is none, when it names another
// node, and at 70-90 % of its life.
func Start(o Options) (*Manager, error) {
	if o.Node == "" {
		return nil, errors.New("a serving certificate names its node: set --node-name")
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, err
	}
	store, err := certificate.NewFileStore(pairPrefix, o.Dir, o.Dir, "", "")
	if err != nil {
		return nil, fmt.Errorf("serving certificate store %s: %w", o.Dir, err)
	}
	failures := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "nodeconfig_agent_serving_certificate_renewal_failures_total",
		Help: "Failed attempts to get the agent's serving certificate (" + v1alpha1.AgentServingSigner + ") from the cluster.",
	})
	name := Name(o.Node)
	m, err := certificate.NewManager(&certificate.Config{
		ClientsetFn: func(*tls.Certificate) (kubernetes.Interface, error) { return o.Kube, nil },
		Template:    &x509.CertificateRequest{Subject: pkix.Name{CommonName: name}, DNSNames: []string{name}, IPAddresses: o.IPs},
		SignerName:  v1alpha1.AgentServingSigner,
		// The signer decides the life (the reconciler's
		// --agent-certificate-lifetime).
		GetUsages:               certificate.DefaultKubeletServingGetUsages,
		CertificateStore:        store,
		CertificateRenewFailure: failures,
		Name:                    "agent-serving",
	})
	if err != nil {
		return nil, err
	}
	s := &Manager{m: m, node: o.Node, log: o.Log}
	if o.Registerer != nil {
		o.Registerer.MustRegister(failures, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "nodeconfig_agent_serving_certificate_expiration_timestamp_seconds",
			Help: "When the agent's serving certificate expires (Unix time; 0 while it has none).",
		}, s.expiry))
	}
	m.Start()
	return s, nil
}

func (s *Manager) expiry() float64 {
	if c := s.m.Current(); c != nil && c.Leaf != nil {
		return float64(c.Leaf.NotAfter.Unix())
	}
	return 0
}

// Wait returns once a valid certificate is held, or with ctx's error;
// meanwhile it says every so often what it waits for.
func (s *Manager) Wait(ctx context.Context) error {
	started := time.Now()
	told := started
	s.log.Info("requesting this node's serving certificate; nothing is served until it is issued", "signer", v1alpha1.AgentServingSigner, "name", Name(s.node))
	return wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		if c := s.m.Current(); c != nil {
			s.log.Info("serving with the node's own certificate", "name", Name(s.node), "notAfter", c.Leaf.NotAfter)
			return true, nil
		}
		if time.Since(told) >= 30*time.Second {
			told = time.Now()
			s.log.Warn("waiting for this node's serving certificate; nothing is served until the reconciler signs it (its leader runs with --agent-signer-key-file)",
				"signer", v1alpha1.AgentServingSigner, "name", Name(s.node), "waited", time.Since(started).Round(time.Second))
		}
		return false, nil
	})
}

// Stop ends the renewals.
func (s *Manager) Stop() { s.m.Stop() }
