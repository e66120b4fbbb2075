// Command reconciler enforces the config lifecycle across the fleet: it
// watches NodeConfigs, Nodes, ConfigMaps and agent Pods and drives each
// node's checkpointd. See the repository README.
package main

import (
	"flag"
	"fmt"
	"strings"
	"time"
	// Maintenance windows name IANA time zones; the image has no zoneinfo.
	_ "time/tzdata"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/configcheck/kubeletexec"
	"nodeconfig.io/services/reconciler/internal/agentcerts"
	"nodeconfig.io/services/reconciler/internal/agents"
	"nodeconfig.io/services/reconciler/internal/controller"
	"nodeconfig.io/services/reconciler/internal/history"
	"nodeconfig.io/services/reconciler/server"
	"nodeconfig.io/services/servekit"
	"nodeconfig.io/services/servekit/kubeapi"
)

func main() {
	servekit.Command{
		Name: "reconciler", Listen: "127.0.0.1:7603", MetricsAddr: "127.0.0.1:9603",
		Usage: "Rolls NodeConfigs out to nodes: checkpoint, assign, activate, soak, promote, roll back.",
	}.Main(new(options))
}

// options are the reconciler's own flags.
type options struct {
	kube kubeapi.Flags
	// The reconciler but for its clients and logger, which Run adds.
	server          server.Options
	leaderElect     bool
	admissionPolicy string
	election        server.LeaderElection
}

// Register implements servekit.Service.
func (o *options) Register(fs *flag.FlagSet) {
	a, le := &o.server.Agents, &o.election
	o.kube.Register(fs, 500, 1000, "a new leader mints a token for each node's agent, at most --workers at once")
	static := agentAddresses{}
	a.Addresses = static
	fs.Var(static, "agent-address", "a node's checkpointd as NODE=HOST:PORT or NODE=unix:///path (repeatable; local runs and tests)")
	fs.StringVar(&a.SocketTemplate, "agent-socket-template", "", "unix socket path of each node's checkpointd with {node} in it (local runs and tests)")
	fs.StringVar(&a.Namespace, "agent-namespace", "nodeconfig-system", "namespace of the agent pods (in-cluster discovery)")
	fs.StringVar(&a.Selector, "agent-selector", "app.kubernetes.io/name=nodeconfig-agent", "label selector of the agent pods")
	fs.IntVar(&a.Port, "agent-port", 7601, "checkpointd's gRPC port in the agent pods")
	fs.StringVar(&a.CAFile, "agent-ca-file", "", "CA (PEM) of the agents' serving certificates; set, agent calls use TLS")
	fs.StringVar(&a.ServerName, "agent-tls-server-name", "{node}"+v1alpha1.AgentServingNameSuffix, "name each agent's certificate is checked for, {node} being the node's name (the name the agent's own certificate carries); a name without {node} is one certificate shared by every agent, which lets any of them pose as another")
	fs.StringVar(&a.SignerCertFile, "agent-signer-cert-file", "", "CA certificate (PEM) that signs the agents' serving certificates (default --agent-ca-file)")
	fs.StringVar(&a.SignerKeyFile, "agent-signer-key-file", "", "key (PEM) of --agent-signer-cert-file; set, the leader approves and signs the agents' CertificateSigningRequests for "+v1alpha1.AgentServingSigner+", each for its own node's name alone, and denies the others")
	fs.StringVar(&a.ServiceAccount, "agent-service-account", "nodeconfig-system/nodeconfig-agent", "NAMESPACE/NAME of the agents' ServiceAccount, the only requester whose certificates are signed")
	fs.DurationVar(&a.CertificateLifetime, "agent-certificate-lifetime", agentcerts.DefaultLifetime, "longest life of an agent's serving certificate (an agent renews it at 70-90 % of it)")
	fs.StringVar(&a.TokenAudience, "agent-token-audience", "", "audience of the token sent to each agent, with {node} in it (e.g. nodeconfig-agent/{node}): each node's token is refused by every other node; empty sends none")
	fs.StringVar(&a.TokenServiceAccount, "agent-token-service-account", "", "NAMESPACE/NAME of the ServiceAccount whose tokens the reconciler requests for the agents (its own)")
	fs.StringVar(&a.TokenBoundPod, "agent-token-bound-pod", "", "the reconciler's own Pod (with --agent-token-bound-pod-uid): each agent token is bound to it, so the tokens stop working once it is gone and one stolen from a replica dies with it (deploy/ sets both from the downward API)")
	fs.StringVar(&a.TokenBoundPodUID, "agent-token-bound-pod-uid", "", "the uid of --agent-token-bound-pod")
	fs.DurationVar(&a.TokenLifetime, "agent-token-lifetime", agents.DefaultTokenLifetime, "life asked for each node's token (at least 10m: the API server refuses a shorter TokenRequest); the leader renews it in the background at 48-72 % of the life granted, or a call at 80 %")
	fs.DurationVar(&a.TokenRenewAfter, "agent-token-renew-after", 0, "each node's token falls due this long after it was minted, if sooner than 80 % of its life (0: at 80 %); the leader replaces it ahead, at 60-90 % of that (tests, to see renewals within seconds)")
	o.server.Rules.Register(fs)
	fs.BoolVar(&o.server.NodeValidationOnly, "node-validation-only", false, "do not validate a new version before assigning it; leave validation to the nodes (on activation), e.g. while their validator is newer than this reconciler's")
	fs.StringVar(&o.server.KubeletCheck, "kubelet-check-binary", kubeletexec.DefaultPath(), "the "+kubeletexec.Binary+" binary that runs the kubelet validator of the central validation, one short-lived process per new version; by default the one next to this binary")
	fs.StringVar(&o.server.NodeEvents, "node-events", "warnings", "which node transitions become Events: warnings (rollbacks, failures, drift) or all (also activated and promoted, two API writes per node per change)")
	fs.IntVar(&a.TokenPrefetch, "agent-token-prefetch", 0, "TokenRequests at a time a new leader makes to mint every node's token before its first pass reaches the node, instead of one on each node's first call (e.g. 16, the default workers). 0, the default: a token is minted only for an agent whose certificate was verified, and at 5,000 nodes minting ahead gains nothing, the API server's CPU limiting it (docs/performance.md)")
	fs.IntVar(&a.MaxConnections, "agent-max-connections", agents.DefaultMaxConnections, "most agent connections kept open (least recently used closed first)")
	fs.IntVar(&o.server.Workers, "workers", 16, "concurrent node syncs (each mostly waits on its agent, so more than the cores)")
	fs.DurationVar(&o.server.BaseDelay, "retry-base-delay", controller.DefaultBaseDelay, "first retry delay after an early error (doubles per failure)")
	fs.DurationVar(&o.server.MaxDelay, "retry-max-delay", controller.DefaultMaxDelay, "cap of the retry delay")
	fs.StringVar(&o.admissionPolicy, "admission-policy", "nodeconfig-reconciler-abandon-mark", "the ValidatingAdmissionPolicy (and its binding of the same name) that confines the reconciler's Node patches to its abandon mark: it refuses to start unless that is installed and enforced; empty: no check (a cluster without deploy/rbac.yaml)")
	fs.StringVar(&o.server.HistoryNamespace, "history-namespace", "nodeconfig-system", "namespace where each NodeConfig's revisions (ControllerRevisions, kubectl nodeconfig history) are kept: the install's own; empty keeps no history")
	fs.IntVar(&o.server.RevisionHistoryLimit, "revision-history-limit", history.DefaultLimit, "revisions each NodeConfig keeps, oldest pruned first (the current and the pinned one are always kept)")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "elect one active replica through a Lease")
	fs.StringVar(&le.Namespace, "leader-elect-namespace", "nodeconfig-system", "namespace of the Lease")
	fs.StringVar(&le.Name, "leader-elect-name", "nodeconfig-reconciler", "name of the Lease")
	fs.DurationVar(&le.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long a lost leader's lease blocks the others")
	fs.DurationVar(&le.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader keeps trying to renew before giving up")
	fs.DurationVar(&le.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "how often candidates try to acquire the lease")
	fs.StringVar(&le.Identity, "identity", "", "leader election identity (default hostname_pid)")
}

// agentAddresses is --agent-address: NODE=ADDRESS, repeatable.
type agentAddresses map[string]string

func (a agentAddresses) String() string { return fmt.Sprint(map[string]string(a)) }
func (a agentAddresses) Set(v string) error {
	node, addr, ok := strings.Cut(v, "=")
	if !ok || node == "" || addr == "" {
		return fmt.Errorf("want NODE=HOST:PORT or NODE=unix:///path, got %q", v)
	}
	a[node] = addr
	return nil
}
