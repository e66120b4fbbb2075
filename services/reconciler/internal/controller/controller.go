// Package controller is the reconciler's informer → workqueue → sync loop
// (after sample-controller): one work item per Node runs the lifecycle
// policy against that node's checkpointd, and one per NodeConfig writes its
// status and handles its deletion. Handlers only enqueue; all logic is in
// the sync functions, which are idempotent and read from listers.
package controller

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/agents"
	"nodeconfig.io/services/reconciler/internal/cmwatch"
	"nodeconfig.io/services/reconciler/internal/policy"
)

// DefaultReconcileInterval is the mean periodic reconcile, as Config
// Connector reconciles its resources.
const DefaultReconcileInterval = 10 * time.Minute

// Options configure a Controller.
type Options struct {
	Kube       kubernetes.Interface
	Dynamic    dynamic.Interface
	Nodes      corelisters.NodeLister
	ConfigMaps corelisters.ConfigMapLister
	// ConfigMapErr says why a referenced ConfigMap cannot be read, if it
	// cannot (nil: the lister's answer is all there is).
	ConfigMapErr func(namespace, name string) error
	NodeConfigs  cache.GenericLister
	Synced       []cache.InformerSynced
	Agents       AgentPool
	Recorder     record.EventRecorder
	// NormalNodeEvents also records each node's Normal transitions
	// (activated, promoted) as Events. Off by default: at fleet scale they
	// are two API writes per node per change that the Node's condition and
	// annotation already show; warnings are always recorded.
	NormalNodeEvents bool
	Metrics          *Metrics
	Log              *slog.Logger
	// BaseDelay and MaxDelay bound the per-node exponential retry (seed
	// 002: 2 s doubling, capped at 2 min).
	BaseDelay, MaxDelay time.Duration
	// NodeValidationOnly skips the central validation of each new version
	// (verdict.go): the nodes alone validate, on activation.
	NodeValidationOnly bool
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

	mu    sync.Mutex
	nodes map[string]*NodeInfo
	// syncs counts each node's syncs, begun and ended, apart from nodes: a
	// node is in nodes (seen) only once a sync recorded it.
	syncs map[string]*syncCount
	// departing indexes the nodes by the NodeConfig they leave, trials
	// the nodes on trial or rolled back by the NodeConfig they are on.
	departing map[string]map[string]struct{}
	trials    map[string]*trialIndex
	// allSeen latches once every Node was synced since the start.
	allSeen atomic.Bool
	// verdicts are the central validator's, per version (verdict.go).
	verdicts verdicts

	selMu      sync.Mutex
	selections map[selectorKey]*selection
	// nodesVersion moves whenever a Node comes, goes or changes labels:
	// a cached selection made at an older version is stale.
	nodesVersion atomic.Int64
}

// NodeInfo is what the reconciler knows of one node; ReconcilerService
// shows it. It is a cache: everything in it can be rebuilt from checkpointd
// and the API, so a fail-over loses nothing.
type NodeInfo struct {
	Name          string
	NodeConfig    string
	State         nodeconfigv1.LifecycleState
	Records       *nodeconfigv1.Records
	Err           string
	Failures      int
	Backoff       time.Duration
	NextReconcile time.Time
	// Admitted marks a node pacing let start a trial (or a departure) that
	// has not ended; AdmittedFor names the NodeConfig whose trial it is.
	Admitted    bool
	AdmittedFor string
	// DepartingFrom names the NodeConfig the node is leaving: its reset
	// waits for, or holds, a place in that NodeConfig's trial.
	DepartingFrom string
	// Generations holds, per live NodeConfig selecting the node, the
	// generation its last sync was computed for: a NodeConfig's status
	// observes a generation only once all its nodes were synced at it.
	Generations map[types.UID]int64
	// Syncs counts the ended syncs, those that ended early with an error
	// too, and SyncsStarted the begun ones: a node's syncs run one at a
	// time (the work queue never hands a key to two workers), so once
	// Syncs is past the SyncsStarted that Resync returned, a sync that
	// began after the Resync has run (GetNode shows both).
	Syncs, SyncsStarted uint64
	// indexed is where admission counts the node (trials.go).
	indexed indexed
}

// New builds a controller.
func New(o Options) *Controller {
	if o.BaseDelay == 0 {
		o.BaseDelay = 2 * time.Second
	}
	if o.MaxDelay == 0 {
		o.MaxDelay = 2 * time.Minute
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
		nodeQ:      workqueue.NewTypedRateLimitingQueueWithConfig(nodeRetry, workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodes"}),
		ncQ:        workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodeconfigs"}),
		metrics:    o.Metrics,
		nodes:      map[string]*NodeInfo{},
		syncs:      map[string]*syncCount{},
		departing:  map[string]map[string]struct{}{},
		trials:     map[string]*trialIndex{},
		selections: map[selectorKey]*selection{},
	}
}

// Handlers returns the informer event handlers; they only enqueue.
func (c *Controller) Handlers() (nodes, configMaps, nodeConfigs, pods cache.ResourceEventHandler) {
	nodes = cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.nodesVersion.Add(1); c.enqueueNode(obj) },
		UpdateFunc: func(old, cur any) {
			o, n := old.(*corev1.Node), cur.(*corev1.Node)
			if !labels.Equals(o.Labels, n.Labels) {
				c.nodesVersion.Add(1)
			}
			// statusd's own patches do not concern the policy; labels and
			// the abandon mark do.
			if !labels.Equals(o.Labels, n.Labels) || o.Annotations[v1alpha1.AnnotationAbandoned] != n.Annotations[v1alpha1.AnnotationAbandoned] {
				c.enqueueNode(cur)
			}
		},
		DeleteFunc: func(obj any) { c.nodesVersion.Add(1); c.enqueueNode(obj) },
	}
	configMaps = cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueueForConfigMap(obj) },
		UpdateFunc: func(_, cur any) { c.enqueueForConfigMap(cur) },
		DeleteFunc: func(obj any) { c.enqueueForConfigMap(obj) },
	}
	nodeConfigs = cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueueForNodeConfig(nil, obj) },
		UpdateFunc: func(old, cur any) { c.enqueueForNodeConfig(old, cur) },
		DeleteFunc: func(obj any) { c.enqueueForNodeConfig(nil, obj) },
	}
	pods = cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueuePodNode(obj) },
		UpdateFunc: func(_, cur any) { c.enqueuePodNode(cur) },
	}
	return
}

// Run waits for the caches and runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer c.nodeQ.ShutDown()
	defer c.ncQ.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), c.o.Synced...) {
		return fmt.Errorf("caches did not sync")
	}
	// Every node once at start: the new leader rebuilds its view.
	nodes, err := c.o.Nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, n := range nodes {
		c.nodeQ.Add(n.Name)
	}
	c.o.Log.Info("reconciler started", "nodes", len(nodes), "workers", workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for c.processNext(ctx, "nodes", c.nodeQ, c.syncNode) {
				}
			}, time.Second)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		wait.UntilWithContext(ctx, func(ctx context.Context) {
			for c.processNext(ctx, "nodeconfigs", c.ncQ, c.syncNodeConfig) {
			}
		}, time.Second)
	}()
	go c.reportQueueDepth(ctx)
	<-ctx.Done()
	c.nodeQ.ShutDown()
	c.ncQ.ShutDown()
	wg.Wait()
	return nil
}

func (c *Controller) processNext(ctx context.Context, name string, q workqueue.TypedRateLimitingInterface[string], sync func(context.Context, string) (time.Duration, error)) bool {
	key, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(key)
	start := time.Now()
	after, err := sync(ctx, key)
	c.metrics.syncSeconds.WithLabelValues(name).Observe(time.Since(start).Seconds())
	if err != nil {
		c.metrics.syncs.WithLabelValues(name, "error").Inc()
		if after > 0 {
			// The sync already took its delay from the rate limiter.
			q.AddAfter(key, after)
		} else {
			q.AddRateLimited(key)
		}
		return true
	}
	c.metrics.syncs.WithLabelValues(name, "ok").Inc()
	q.Forget(key)
	if after > 0 {
		q.AddAfter(key, after)
	}
	return true
}

// Resync reconciles a node now, dropping its backoff. It returns the
// node's SyncsStarted before the ask: the node has been synced since once
// its Syncs is past that. The count is read before the node is queued, so a
// sync is sure to begin after it (if one is under way, the queue runs the
// node again once it ends).
func (c *Controller) Resync(node string) (syncsStarted uint64) {
	c.mu.Lock()
	if n := c.syncs[node]; n != nil {
		syncsStarted = n.started
	}
	c.mu.Unlock()
	c.nodeQ.Forget(node)
	c.nodeQ.Add(node)
	return syncsStarted
}

// syncCount is a node's syncs begun and ended.
type syncCount struct{ started, ended uint64 }

// syncBegan counts a sync of node beginning; the returned func counts it
// ending, whatever way it ends (not after the node was forgotten).
func (c *Controller) syncBegan(node string) (ended func()) {
	c.mu.Lock()
	n := c.syncs[node]
	if n == nil {
		n = &syncCount{}
		c.syncs[node] = n
	}
	n.started++
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.syncs[node] == n {
			n.ended++
		}
	}
}

// withSyncsLocked fills info's sync counts; c.mu must be held.
func (c *Controller) withSyncsLocked(info NodeInfo) NodeInfo {
	if n := c.syncs[info.Name]; n != nil {
		info.Syncs, info.SyncsStarted = n.ended, n.started
	}
	return info
}

// NodeInfos returns copies of every node's info, by name.
func (c *Controller) NodeInfos() []NodeInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]NodeInfo, 0, len(c.nodes))
	for _, n := range c.nodes {
		out = append(out, c.withSyncsLocked(*n))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// NodeInfo returns one node's info.
func (c *Controller) NodeInfo(name string) (NodeInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[name]
	if !ok {
		return NodeInfo{}, false
	}
	return c.withSyncsLocked(*n), true
}

// nodeConfigs lists every NodeConfig from the cache.
func (c *Controller) nodeConfigs() ([]*v1alpha1.NodeConfig, error) {
	objs, err := c.o.NodeConfigs.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := make([]*v1alpha1.NodeConfig, 0, len(objs))
	for _, obj := range objs {
		nc, err := toNodeConfig(obj)
		if err != nil {
			c.o.Log.Error("skipping undecodable NodeConfig", "err", err)
			continue
		}
		out = append(out, nc)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func toNodeConfig(obj any) (*v1alpha1.NodeConfig, error) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("unexpected NodeConfig object %T", obj)
	}
	return v1alpha1.FromUnstructured(u.Object)
}

// selector is a NodeConfig's node selector, parsed once per generation:
// parsing validates with regular expressions, and admission asks for the
// selected nodes on every node sync (it was most of the CPU of a 1,000-node
// rollout).
func (c *Controller) selector(nc *v1alpha1.NodeConfig) labels.Selector {
	c.selMu.Lock()
	defer c.selMu.Unlock()
	return c.selectionLocked(nc).selector
}

// selectorErr is why nc's selector does not parse; nil when it does. The
// CRD refuses what it can, but an object stored before its rules were
// tightened is still served as it is.
func (c *Controller) selectorErr(nc *v1alpha1.NodeConfig) error {
	c.selMu.Lock()
	defer c.selMu.Unlock()
	return c.selectionLocked(nc).err
}

// selectionLocked returns the cache entry of nc's generation, parsing its
// selector when the entry is new.
func (c *Controller) selectionLocked(nc *v1alpha1.NodeConfig) *selection {
	key := selectorKey{nc.UID, nc.Name, nc.Generation}
	if e, ok := c.selections[key]; ok {
		return e
	}
	e := &selection{selector: labels.Nothing()}
	if nc.Spec.NodeSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(nc.Spec.NodeSelector)
		if err != nil {
			e.err = err
		} else {
			e.selector = sel
		}
	}
	if len(c.selections) > 1024 {
		clear(c.selections) // old generations; cheap to parse again
	}
	c.selections[key] = e
	return e
}

type selectorKey struct {
	uid        types.UID
	name       string
	generation int64
}

// selection is a NodeConfig generation's parsed selector and, when listed,
// the names of the nodes it selected at a nodesVersion.
type selection struct {
	selector labels.Selector
	// err is the parse error of an invalid selector, which selects nothing.
	err     error
	listed  bool
	version int64
	names   []string
}

func (c *Controller) selects(nc *v1alpha1.NodeConfig, node *corev1.Node) bool {
	return c.selector(nc).Matches(labels.Set(node.Labels))
}

func (c *Controller) enqueueNode(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if n, ok := obj.(*corev1.Node); ok {
		c.nodeQ.Add(n.Name)
	}
}

func (c *Controller) enqueuePodNode(obj any) {
	if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
		c.nodeQ.Add(p.Spec.NodeName)
	}
}

// enqueueForConfigMap enqueues the nodes of every NodeConfig using it.
func (c *Controller) enqueueForConfigMap(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	ncs, err := c.nodeConfigs()
	if err != nil {
		return
	}
	for _, nc := range ncs {
		if s := nc.Spec.Source; s != nil && s.ConfigMap != nil && s.ConfigMap.Namespace == cm.Namespace && s.ConfigMap.Name == cm.Name {
			c.enqueueSelected(nc)
		}
	}
}

func (c *Controller) enqueueForNodeConfig(old, cur any) {
	if old != nil && cur != nil {
		o, oerr := toNodeConfig(old)
		n, nerr := toNodeConfig(cur)
		if oerr == nil && nerr == nil && onlyStatusChanged(o, n) {
			// Our own status write: the nodes' policy did not change, so
			// only the nodes held back by pacing look again (at 5,000
			// nodes, re-syncing every node on every status write was most
			// of the reconciler's work).
			c.ncQ.Add(n.Name)
			c.wakeWaiting(n.Name)
			return
		}
	}
	for _, obj := range []any{old, cur} {
		if obj == nil {
			continue
		}
		nc, err := toNodeConfig(obj)
		if err != nil {
			continue
		}
		c.ncQ.Add(nc.Name)
		c.enqueueSelected(nc)
	}
}

// onlyStatusChanged says whether an update left everything a node sync
// reads as it was: the spec (generation), the annotations, the finalizers
// and the deletion mark.
func onlyStatusChanged(o, n *v1alpha1.NodeConfig) bool {
	return o.Generation == n.Generation && o.UID == n.UID &&
		maps.Equal(o.Annotations, n.Annotations) && slices.Equal(o.Finalizers, n.Finalizers) &&
		o.DeletionTimestamp.Equal(n.DeletionTimestamp)
}

func (c *Controller) enqueueSelected(nc *v1alpha1.NodeConfig) {
	for _, name := range c.selectedNodes(nc) {
		c.nodeQ.Add(name)
	}
}

// reconcileInterval reads the NodeConfig's annotation; 0 means no periodic
// reconcile once up to date. An invalid value means the default, and the
// NodeConfig reports it (reconcileIntervalErr).
func reconcileInterval(nc *v1alpha1.NodeConfig) time.Duration {
	iv, _ := parseReconcileInterval(nc)
	return iv
}

// reconcileIntervalErr says what is wrong with the annotation; nil when it
// is absent or valid.
func reconcileIntervalErr(nc *v1alpha1.NodeConfig) error {
	_, err := parseReconcileInterval(nc)
	return err
}

func parseReconcileInterval(nc *v1alpha1.NodeConfig) (time.Duration, error) {
	if nc == nil {
		return DefaultReconcileInterval, nil
	}
	v, ok := nc.Annotations[v1alpha1.AnnotationReconcileInterval]
	if !ok {
		return DefaultReconcileInterval, nil
	}
	secs, err := strconv.ParseInt(v, 10, 64)
	if err != nil || secs < 0 || secs > math.MaxInt64/int64(time.Second) {
		return DefaultReconcileInterval, fmt.Errorf("annotation %s is %q, not a whole number of seconds >= 0 (0 turns the periodic reconcile off); using the default of %d s until it is fixed",
			v1alpha1.AnnotationReconcileInterval, v, int64(DefaultReconcileInterval/time.Second))
	}
	return time.Duration(secs) * time.Second, nil
}

func (c *Controller) reportQueueDepth(ctx context.Context) {
	wait.UntilWithContext(ctx, func(context.Context) {
		c.metrics.queueDepth.Set(float64(c.nodeQ.Len()))
		c.mu.Lock()
		counts := map[nodeconfigv1.LifecycleState]int{}
		for _, n := range c.nodes {
			counts[n.State]++
		}
		c.mu.Unlock()
		for st, name := range nodeconfigv1.LifecycleState_name {
			c.metrics.nodesByState.WithLabelValues(name).Set(float64(counts[nodeconfigv1.LifecycleState(st)]))
		}
	}, 5*time.Second)
}

func nodeRef(node *corev1.Node) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID}
}

func nodeConfigRef(nc *v1alpha1.NodeConfig) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "NodeConfig", APIVersion: "nodeconfig.io/v1alpha1", Name: nc.Name, UID: nc.UID}
}

func (c *Controller) emit(node *corev1.Node, nc *v1alpha1.NodeConfig, events []policy.Event) {
	for _, e := range events {
		typ := corev1.EventTypeNormal
		if e.Warning {
			typ = corev1.EventTypeWarning
		}
		switch e.Reason {
		case policy.EventPromoted:
			c.metrics.promotions.Inc()
		case policy.EventRolledBack:
			c.metrics.rollbacks.Inc()
		}
		if c.o.Recorder == nil || (!e.Warning && !c.o.NormalNodeEvents) {
			continue
		}
		c.o.Recorder.Event(nodeRef(node), typ, e.Reason, e.Message)
		// The NodeConfig gets what needs attention; its status counts the rest.
		if nc != nil && e.Warning {
			c.o.Recorder.Eventf(nodeConfigRef(nc), typ, e.Reason, "node %s: %s", node.Name, e.Message)
		}
	}
}

// ReferencedConfigMaps names the ConfigMaps the NodeConfigs in lister use:
// the ones the reconciler watches.
func ReferencedConfigMaps(lister cache.GenericLister) []cmwatch.Ref {
	objs, err := lister.List(labels.Everything())
	if err != nil {
		return nil
	}
	var refs []cmwatch.Ref
	for _, obj := range objs {
		nc, err := toNodeConfig(obj)
		if err != nil || nc.Spec.Source == nil || nc.Spec.Source.ConfigMap == nil {
			continue
		}
		refs = append(refs, cmwatch.Ref{Namespace: nc.Spec.Source.ConfigMap.Namespace, Name: nc.Spec.Source.ConfigMap.Name})
	}
	return refs
}
