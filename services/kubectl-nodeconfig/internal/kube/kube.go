// Package kube builds the Kubernetes clients from kubeconfig the way kubectl
// does: $KUBECONFIG or ~/.kube/config, in-cluster as a last resort, with
// --kubeconfig and --context on top.
package kube

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	nodeconfigclient "nodeconfig.io/services/api/client/clientset"
)

// Flags are the kubeconfig flags.
type Flags struct {
	Kubeconfig string
	Context    string
}

// Clients are what the commands use.
type Clients struct {
	Config *rest.Config
	Kube   kubernetes.Interface
	// NodeConfigs is the NodeConfig API's typed client.
	NodeConfigs nodeconfigclient.Interface
}

// Connect loads the config and builds the clients; nothing is sent yet.
func (f Flags) Connect() (*Clients, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.Kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: f.Context}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.UserAgent = "kubectl-nodeconfig"
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ncs, err := nodeconfigclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Clients{Config: cfg, Kube: kube, NodeConfigs: ncs}, nil
}
