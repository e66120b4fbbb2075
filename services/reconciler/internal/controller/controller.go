// Package controller is the reconciler's informer → workqueue → sync loop
// (after sample-controller): one work item per Node runs the lifecycle
// policy against that node's checkpointd, and one per NodeConfig writes its
// status and handles its deletion. Handlers only enqueue; all logic is in
// the sync functions, which are idempotent and read from listers.
package controller

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/metadata/metadatalister"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/lru"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	nodeconfigclient "nodeconfig.io/services/api/client/clientset"
	nodeconfiglisters "nodeconfig.io/services/api/client/listers/api/v1alpha1"
	"nodeconfig.io/services/configcheck"
	"nodeconfig.io/services/configcheck/fieldpolicy"
	"nodeconfig.io/services/reconciler/internal/agents"
	"nodeconfig.io/services/reconciler/internal/history"
	"nodeconfig.io/services/reconciler/internal/rollout"
)

// Options configure a Controller.
type Options struct {
	Kube kubernetes.Interface
	// NodeConfigClient writes the NodeConfigs: their finalizer and status.
	NodeConfigClient nodeconfigclient.Interface
	// Nodes are the Nodes' metadata (labels, the abandoned mark): all
	// the controller reads of a Node.
	Nodes      metadatalister.Lister
	ConfigMaps corelisters.ConfigMapLister
	// ConfigMapErr says why a referenced ConfigMap cannot be read, if it
	// cannot (nil: the lister's answer is all there is).
	ConfigMapErr func(namespace, name string) error
	// ConfigMapListed says whether the watch of a referenced ConfigMap has
	// listed it once (nil: always). Until then the lister's "not found"
	// is no news, and a node that uses it waits, unsynced, for the
	// listing's event (ConfigMaps' Add for one found, Delete for one not)
	// or a recheck a few seconds on.
	ConfigMapListed func(namespace, name string) bool
	// NodeConfigs are the cached NodeConfigs (NodeConfigInformer).
	NodeConfigs nodeconfiglisters.NodeConfigLister
	Synced      []cache.InformerSynced
	Agents      AgentPool
	Recorder    record.EventRecorder
	// NormalNodeEvents also records each node's Normal transitions
	// (activated, promoted) as Events. Off by default: at fleet scale they
	// are two API writes per node per change that the Node's condition and
	// annotation already show; warnings are always recorded.
	NormalNodeEvents bool
	Metrics          *Metrics
	Log              *slog.Logger
	// BaseDelay and MaxDelay bound the per-node exponential retry
	// (0: DefaultBaseDelay, DefaultMaxDelay).
	BaseDelay, MaxDelay time.Duration
	// NodeValidationOnly skips the central validation of each new version
	// (verdict.go): the nodes alone validate, on activation.
	NodeValidationOnly bool
	// Rules are the field policy and the validator: none opt-in, checked
	// before any node is assigned a version (verdict.go).
	Rules fieldpolicy.Rules
	// Checker runs the central validation; its kubelet validator is a
	// child process (kubeletexec), so this binary does not link the
	// kubelet's code.
	Checker configcheck.Checker
	// History keeps each version a NodeConfig rolls out as a revision, and
	// reads the revision spec.source.revision pins; nil keeps none (and
	// resolves no pinned revision).
	History *history.Store
	// RPCTimeout bounds one sync's calls to a node's checkpointd.
	RPCTimeout time.Duration
	Now        func() time.Time
}

// AgentPool hands out clients of the nodes' checkpointds (agents.Pool); a
// caller releases each client once done with it.
type AgentPool interface {
	For(node string) (client nodeconfigv1.CheckpointServiceClient, release func(), err error)
	Forget(node string)
}

var _ AgentPool = (*agents.Pool)(nil)

// Controller reconciles nodes and NodeConfigs.
type Controller struct {
	o Options
	// nodeRetry is the node queue's rate limiter; syncNode asks it for the
	// next delay itself so that GetNode reports the delay actually used.
	nodeRetry workqueue.TypedRateLimiter[string]
	nodeQ     workqueue.TypedRateLimitingInterface[string]
	ncQ       workqueue.TypedRateLimitingInterface[string]
	metrics   *Metrics

	// book is the rollout bookkeeping (trials, departures, waiting nodes,
	// halts) with its own lock. Lock order: c.mu may be held while calling
	// the book (record and computeStatus do, so that a status counts the
	// node cache and the book at one moment); the book calls nothing back,
	// so its lock is never held while c.mu is taken.
	book *rollout.Book

	// mu guards the node cache (nodecache.go), the sync counts
	// (resync.go), the Nodes not seen yet (seen.go) and firstStatusSync.
	mu    sync.Mutex
	nodes map[string]*NodeInfo
	// syncs holds each node's count of syncs begun and the place of its
	// last completed one (resync.go), apart from nodes: a node is in nodes
	// (seen) only once a sync recorded it.
	syncs map[string]*syncCount
	// allSeen latches once every Node was synced since the start; until
	// then unseen holds the Nodes not synced yet (seen.go).
	allSeen atomic.Bool
	// firstStatusSync is when this reconciler first synced a NodeConfig's
	// status (holdingStatuses).
	firstStatusSync time.Time
	unseen          map[string]struct{}
	// verdicts are the central validator's, per version (verdict.go).
	verdicts verdicts
	// sources keeps each config source of the nodes' records once
	// (nodecache.go): sourceKey -> *ConfigSource.
	sources *lru.Cache

	// selMu guards the selection cache (selection.go) apart from mu:
	// asking which nodes a NodeConfig selects never waits on the node
	// cache.
	selMu      sync.Mutex
	selections map[selectorKey]*selection
	// waveValues are the nodes' values of each topologyKey (waves.go),
	// also under selMu.
	waveValues map[string]*waveValues
	// listing holds the nodes that wait for their ConfigMap's first
	// listing (listing.go).
	listing listingWaits
	// nodesVersion moves whenever a Node comes, goes or changes labels:
	// a cached selection made at an older version is stale.
	nodesVersion atomic.Int64
}

// The per-node retry after an early error: a few quick tries, then no
// more than one every two minutes for a node that keeps failing.
const (
	DefaultBaseDelay = 2 * time.Second
	DefaultMaxDelay  = 2 * time.Minute
)

// sharedSources bounds the config sources kept once: the configs alive at
// a time are few.
const sharedSources = 256

// New builds a controller.
func New(o Options) *Controller {
	if o.BaseDelay == 0 {
		o.BaseDelay = DefaultBaseDelay
	}
	if o.MaxDelay == 0 {
		o.MaxDelay = DefaultMaxDelay
	}
	if o.RPCTimeout == 0 {
		o.RPCTimeout = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	nodeRetry := newRateLimiter(o.BaseDelay, o.MaxDelay)
	return &Controller{
		o:          o,
		nodeRetry:  nodeRetry,
		nodeQ:      workqueue.NewTypedRateLimitingQueueWithConfig(nodeRetry, workqueue.TypedRateLimitingQueueConfig[string]{Name: NodeQueue}),
		ncQ:        workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{Name: NodeConfigQueue}),
		metrics:    o.Metrics,
		book:       rollout.New(o.Now),
		nodes:      map[string]*NodeInfo{},
		verdicts:   verdicts{judged: lru.New(maxVerdicts), failed: lru.New(maxVerdicts)},
		sources:    lru.New(sharedSources),
		syncs:      map[string]*syncCount{},
		selections: map[selectorKey]*selection{},
		waveValues: map[string]*waveValues{},
		listing:    listingWaits{recheck: configMapListingRecheck},
	}
}
