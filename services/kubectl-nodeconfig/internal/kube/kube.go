// Package kube builds the Kubernetes clients from k8s.io/cli-runtime's
// flags, as kubectl does: --kubeconfig, $KUBECONFIG or ~/.kube/config,
// in-cluster as a last resort, with --context, --cluster, --user, --as,
// --token, --server, --request-timeout and the rest on top.
package kube

import (
	"fmt"

	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	nodeconfigclient "nodeconfig.io/services/api/client/clientset"
)

// UserAgent is what the plugin says it is to the API server.
const UserAgent = "kubectl-nodeconfig"

// Clients are what the commands use.
type Clients struct {
	Config *rest.Config
	Kube   kubernetes.Interface
	// NodeConfigs is the NodeConfig API's typed client.
	NodeConfigs nodeconfigclient.Interface
}

// Connect loads the config the flags say and builds the clients; nothing
// is sent yet.
func Connect(flags genericclioptions.RESTClientGetter) (*Clients, error) {
	loaded, err := flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg := rest.CopyConfig(loaded)
	cfg.UserAgent = UserAgent
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
