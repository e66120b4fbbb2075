package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"nodeconfig.io/test/framework/proc"
)

// The agents' ServiceAccounts as deploy/rbac.yaml names them, installed
// into the namespace the install uses: checkpointd's, which reviews its
// callers, and statusd's, which writes its Node's status.
const (
	agentNamespace = "nodeconfig-system"
	agentAccount   = "nodeconfig-agent"
	statusAccount  = "nodeconfig-status"
	statusUser     = "system:serviceaccount:" + agentNamespace + ":" + statusAccount
)

// installAgentAccess applies deploy/rbac.yaml and deploy/flowcontrol.yaml
// into agentNamespace as an install does: the agents' ServiceAccounts,
// their RBAC, the admission policy that lets statusd write only its own
// Node's condition and annotation, and the priority level their requests
// queue in (without -priority-and-fairness the API server has no queues).
func installAgentAccess(ctx context.Context, kubeconfig string) error {
	root, err := proc.RepoRoot()
	if err != nil {
		return err
	}
	kubectl, err := proc.Binary("kubectl")
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "apply", "-n", agentNamespace,
		"-f", filepath.Join(root, "deploy", "rbac.yaml"), "-f", filepath.Join(root, "deploy", "flowcontrol.yaml")).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

// nodeTokens mints, for nodes from to to-1, a token of the agents'
// ServiceAccount account bound to each node's Node (boundTokens).
func nodeTokens(ctx context.Context, kube *rest.Config, account string, from, to int) ([]string, error) {
	names := make([]string, to-from)
	for k := range names {
		names[k] = nodeName(from + k)
	}
	return boundTokens(ctx, kube, account, names)
}

// boundTokens mints a token of the agents' ServiceAccount account bound to
// each of the Nodes named, as a pod's projected token is bound to the node
// it runs on: the API server adds the node's name to the user, and the
// admission policy checks it. The tokens last the run (an hour).
func boundTokens(ctx context.Context, kube *rest.Config, account string, names []string) ([]string, error) {
	cfg := rest.CopyConfig(kube)
	cfg.QPS, cfg.Burst = 1000, 2000
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	tokens := make([]string, len(names))
	err = forEach(len(names), 32, func(k int) error {
		tr, err := admin.CoreV1().ServiceAccounts(agentNamespace).CreateToken(ctx, account, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{
				BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: names[k]},
				ExpirationSeconds: new(int64(3600)),
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("token bound to Node %s: %w", names[k], err)
		}
		tokens[k] = tr.Status.Token
		return nil
	})
	return tokens, err
}

// asAgent is kube's server and CA with one of node's agent tokens instead
// of the admin's credentials.
func asAgent(kube *rest.Config, token string) *rest.Config {
	cfg := rest.AnonymousClientConfig(kube)
	cfg.BearerToken = token
	return cfg
}

const agentPolicy = "nodeconfig-status-own-node" // deploy/rbac.yaml
