// Package server is the reconciler as a library: the controller with its
// informers, agent pool, event recorder and leader election, and the
// ReconcilerService that shows its nodes. The reconciler binary is this
// plus flags, Kubernetes clients and listeners.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/leaderelection"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	nodeconfigclient "nodeconfig.io/services/api/client/clientset"
	"nodeconfig.io/services/configcheck/fieldpolicy"
	"nodeconfig.io/services/configcheck/kubeletexec"
	"nodeconfig.io/services/reconciler/internal/agentcerts"
	"nodeconfig.io/services/reconciler/internal/agents"
	"nodeconfig.io/services/reconciler/internal/controller"
	"nodeconfig.io/services/reconciler/internal/grpcapi"
)

// maxTokenNodes bounds the per-node agent tokens kept (about 1 KiB each):
// above the largest fleet measured, so a sync never waits on a new token
// for want of room.
const maxTokenNodes = 1 << 15

// Options configure a reconciler.
type Options struct {
	Kube kubernetes.Interface
	// NodeConfigClient lists, watches and writes the NodeConfigs.
	NodeConfigClient nodeconfigclient.Interface
	// Metadata lists and watches the Nodes, of which the reconciler reads
	// only metadata.
	Metadata metadata.Interface
	Log      *slog.Logger
	Agents   Agents
	// NodeEvents says which node transitions become Events: "warnings"
	// (rollbacks, failures, drift) or "all" (also activated and promoted).
	NodeEvents string
	// NodeValidationOnly leaves validating a new version to the nodes (on
	// activation) instead of validating it before assigning it.
	NodeValidationOnly bool
	// Rules are the field policy and the validator: none opt-in.
	Rules fieldpolicy.Rules
	// KubeletCheck is the nodeconfig-kubelet-check binary the central
	// validation runs for the kubelet validator (kubeletexec): the
	// kubelet's code stays out of this process. New refuses a path that is
	// not an executable file, unless NodeValidationOnly.
	KubeletCheck string
	// Workers is how many node syncs run at once.
	Workers int
	// BaseDelay and MaxDelay bound a node's retry delay after an early
	// error (doubling per failure).
	BaseDelay, MaxDelay time.Duration
	// HistoryNamespace is where each NodeConfig's revisions are kept
	// (ControllerRevisions); empty keeps none.
	HistoryNamespace string
	// RevisionHistoryLimit is how many revisions each NodeConfig keeps
	// (the current and the pinned one are always kept).
	RevisionHistoryLimit int
	// LeaderElection, when set, runs the controller only while this
	// replica holds the Lease; nil runs it at once.
	LeaderElection *LeaderElection
}

// Agents say where the nodes' checkpointds are and how they are called.
// With neither Addresses nor SocketTemplate, a node's agent is the agent
// Pod on it (Namespace, Selector, Port).
type Agents struct {
	// Addresses maps a node to HOST:PORT or unix:///path.
	Addresses map[string]string
	// SocketTemplate is a unix socket path with {node} in it.
	SocketTemplate string
	Namespace      string
	Selector       string
	Port           int
	// CAFile, when set, makes agent calls TLS, each agent's certificate
	// checked for ServerName, where {node} is the node's name.
	CAFile, ServerName string
	// SignerCertFile and SignerKeyFile, when set, are the CA that signs
	// the agents' serving certificates (agentcerts): requests of
	// ServiceAccount (NAMESPACE/NAME) for its own node's name alone.
	// SignerCertFile defaults to CAFile.
	SignerCertFile, SignerKeyFile string
	ServiceAccount                string
	// CertificateLifetime is the longest life of an agent's certificate.
	CertificateLifetime time.Duration
	// TokenAudience, when set, has {node} in it: each call carries a token
	// of TokenServiceAccount (NAMESPACE/NAME) for the called node alone.
	TokenAudience       string
	TokenServiceAccount string
	TokenLifetime       time.Duration
	// TokenRenewAfter replaces a token this long after it was minted, if
	// sooner than 80 % of its life (0: at 80 %).
	TokenRenewAfter time.Duration
	// TokenBoundPod and TokenBoundPodUID, when set, are the reconciler's
	// own Pod, which every token is bound to.
	TokenBoundPod, TokenBoundPodUID string
	// MaxConnections bounds the open agent connections.
	MaxConnections int
	// TokenPrefetch is how many TokenRequests a new leader makes at a time
	// to mint the nodes' tokens ahead of its first pass (0: none, each is
	// minted on its node's first call).
	TokenPrefetch int
}

// Reconciler is a configured reconciler; Run drives the fleet.
type Reconciler struct {
	o        Options
	pool     agents.Options // without the Pod lister, which each leadership builds
	election *leaderelection.LeaderElectionConfig
	metrics  *controller.Metrics
	// leader is 1 while this replica leads, 0 otherwise: the sum across
	// replicas is 1, and 0 for long means nobody rolls anything out.
	leader prometheus.Gauge
	// current is the controller of the leadership under way, nil between
	// leaderships: the ReconcilerService answers from it.
	current atomic.Pointer[controller.Controller]
	// certs signs the agents' serving certificates while this replica
	// leads; nil when the reconciler has no signer CA.
	certs *agentcerts.Signer
	// stopStandingBy ends the standby of the election under way (standBy).
	stopStandingBy context.CancelFunc
}

// New checks the options and builds the agents' credentials and the
// leader election; nothing runs until Run.
func New(o Options) (*Reconciler, error) {
	if o.NodeEvents != "warnings" && o.NodeEvents != "all" {
		return nil, fmt.Errorf("--node-events %q: want warnings or all", o.NodeEvents)
	}
	if !o.NodeValidationOnly {
		if err := kubeletexec.Verify(o.KubeletCheck); err != nil {
			return nil, fmt.Errorf("central validation: %v: install %s next to the reconciler (make build and the image do), "+
				"name it with --kubelet-check-binary, or leave validation to the nodes with --node-validation-only", err, kubeletexec.Binary)
		}
	}
	tokens, err := nodeTokens(o.Kube, o.Agents)
	if err != nil {
		return nil, err
	}
	transport, err := agents.Credentials(o.Agents.CAFile, o.Agents.ServerName, o.Agents.TokenAudience != "")
	if err != nil {
		return nil, err
	}
	r := &Reconciler{o: o, leader: newLeaderGauge(), pool: agents.Options{
		Static: o.Agents.Addresses, SocketTemplate: o.Agents.SocketTemplate, Port: o.Agents.Port,
		Transport: transport, MaxConnections: o.Agents.MaxConnections, Tokens: tokens, TokenPrefetch: o.Agents.TokenPrefetch,
	}}
	if r.certs, err = agentSigner(o.Kube, o.Agents, o.Log); err != nil {
		return nil, err
	}
	if o.Agents.CAFile != "" && !strings.Contains(o.Agents.ServerName, "{node}") {
		o.Log.Warn("every agent is checked for one name: an agent holding that certificate's key can pose as any other node's agent; name {node} in --agent-tls-server-name where each agent has its own certificate",
			"agent-tls-server-name", o.Agents.ServerName)
	}
	if o.LeaderElection != nil {
		if r.election, err = r.electionConfig(*o.LeaderElection); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// nodeTokens builds the per-node token minter when a.TokenAudience asks
// for tokens; nil when it does not.
func nodeTokens(kube kubernetes.Interface, a Agents) (*agents.NodeTokens, error) {
	if a.TokenAudience == "" {
		return nil, nil
	}
	ns, name, ok := strings.Cut(a.TokenServiceAccount, "/")
	if !ok || ns == "" || name == "" {
		return nil, fmt.Errorf("--agent-token-service-account %q: want NAMESPACE/NAME (needed with --agent-token-audience)", a.TokenServiceAccount)
	}
	o := agents.TokenOptions{Lifetime: a.TokenLifetime, RenewAfter: a.TokenRenewAfter}
	if a.TokenBoundPod != "" {
		if a.TokenBoundPodUID == "" {
			return nil, errors.New("--agent-token-bound-pod needs --agent-token-bound-pod-uid: the API server binds a token to one Pod, by name and uid")
		}
		o.BoundPod = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: a.TokenBoundPod, UID: types.UID(a.TokenBoundPodUID)}
	}
	tokens, err := agents.NewNodeTokens(kube.CoreV1().ServiceAccounts(ns), name, a.TokenAudience, maxTokenNodes, o)
	if err != nil {
		return nil, fmt.Errorf("--agent-token-audience, --agent-token-lifetime, --agent-token-renew-after: %w", err)
	}
	return tokens, nil
}

// agentSigner builds the signer of the agents' serving certificates when
// a.SignerKeyFile names its CA's key; nil when it does not.
func agentSigner(kube kubernetes.Interface, a Agents, log *slog.Logger) (*agentcerts.Signer, error) {
	if a.SignerKeyFile == "" {
		return nil, nil
	}
	ns, name, ok := strings.Cut(a.ServiceAccount, "/")
	if !ok || ns == "" || name == "" {
		return nil, fmt.Errorf("--agent-service-account %q: want NAMESPACE/NAME (needed with --agent-signer-key-file)", a.ServiceAccount)
	}
	ca := agentcerts.CA{CertFile: a.SignerCertFile, KeyFile: a.SignerKeyFile}
	if ca.CertFile == "" {
		ca.CertFile = a.CAFile
	}
	s, err := agentcerts.New(agentcerts.Options{Kube: kube, AgentNamespace: ns, AgentName: name, CA: ca, Lifetime: a.CertificateLifetime, Log: log})
	if err != nil {
		return nil, fmt.Errorf("--agent-signer-cert-file, --agent-signer-key-file, --agent-certificate-lifetime: %w", err)
	}
	return s, nil
}

// Register adds the ReconcilerService to g and the controller's metrics to
// reg (nil: no metrics). It is called before Run.
func (r *Reconciler) Register(g *grpc.Server, reg prometheus.Registerer) {
	// One set of metrics for every leadership: a registry takes each
	// collector once.
	r.metrics = controller.NewMetrics(reg)
	if reg != nil {
		reg.MustRegister(r.leader)
	}
	if r.pool.Tokens != nil && reg != nil {
		r.pool.Tokens.Register(reg)
	}
	if r.certs != nil && reg != nil {
		r.certs.Register(reg)
	}
	nodeconfigv1.RegisterReconcilerServiceServer(g, &grpcapi.Service{Nodes: r.nodes})
}

func newLeaderGauge() prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodeconfig_reconciler_leader",
		Help: "1 while this replica leads (holds the Lease, or runs without leader election), 0 otherwise."})
}

// nodes is the controller of the leadership under way, nil while this
// replica does not lead.
func (r *Reconciler) nodes() grpcapi.Nodes {
	if c := r.current.Load(); c != nil {
		return c
	}
	return nil
}

// Run reconciles the fleet until ctx ends: at once, or with leader
// election while this replica holds the Lease. It returns an error only
// when the leader election is misconfigured.
func (r *Reconciler) Run(ctx context.Context) error {
	if r.election == nil {
		r.lead(ctx)
		return nil
	}
	return r.runElected(ctx)
}
