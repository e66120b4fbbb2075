// Package kubeapi is a service's client configuration for the Kubernetes
// API: where the API server is (a kubeconfig, or the Pod's in-cluster
// configuration) and how many requests a second the service may send it.
package kubeapi

import (
	"flag"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Flags are a service's API client settings.
type Flags struct {
	Kubeconfig string
	// QPS and Burst are the client-side limit. client-go turns a zero into
	// its default of 5 a second, and a burst of zero would never let a
	// request through, so both are checked before use.
	QPS   float64
	Burst int
}

// Register adds --kubeconfig, --kube-api-qps and --kube-api-burst with the
// service's defaults; why says what the limit holds back.
func (f *Flags) Register(fs *flag.FlagSet, qps float64, burst int, why string) {
	fs.StringVar(&f.Kubeconfig, "kubeconfig", "", "kubeconfig file; empty means in-cluster config")
	fs.Float64Var(&f.QPS, "kube-api-qps", qps, "most API requests per second (client-side limit; "+why+")")
	fs.IntVar(&f.Burst, "kube-api-burst", burst, "API requests allowed in a burst above --kube-api-qps")
}

// Config loads the client configuration, with the limit and userAgent.
func (f *Flags) Config(userAgent string) (*rest.Config, error) {
	if !(f.QPS > 0) {
		return nil, fmt.Errorf("--kube-api-qps %v: want more than 0 requests a second", f.QPS)
	}
	if f.Burst < 1 {
		return nil, fmt.Errorf("--kube-api-burst %d: want at least 1 request", f.Burst)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", f.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	cfg.UserAgent = userAgent
	cfg.QPS, cfg.Burst = float32(f.QPS), f.Burst
	return cfg, nil
}
