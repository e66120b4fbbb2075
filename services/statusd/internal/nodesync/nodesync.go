// Package nodesync runs the setter chain against statusd's own Node and
// patches only what changed, in one strategic-merge patch of the status
// subresource: the conditions and the annotation together (the Node status
// subresource keeps metadata changes, which the kubelet relies on too), so
// one change costs one write and statusd needs no write access to Node
// specs. Changes arriving close together coalesce into one patch, a sync
// with no diff sends nothing (no heartbeats, KEP-1623), and a failed patch
// is retried with capped backoff from the latest state.
package nodesync

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"nodeconfig.io/services/statusd/internal/setters"
)

// Options configure a Syncer.
type Options struct {
	Client   kubernetes.Interface
	NodeName string
	Setters  func() []setters.Named
	// SyncPeriod is the mean period of the full sync (jittered by 4%, like
	// the kubelet's node status loop). Every input of the setters triggers
	// a sync of its own (a record change, a report, the Node itself), so
	// the period is a safety net, not how changes arrive.
	SyncPeriod time.Duration
	// Quiet is how long no change must arrive before a sync runs; MaxDelay
	// bounds how long a burst of changes can hold a sync back.
	Quiet, MaxDelay time.Duration
	// Settling reports a state that is about to change by itself (a config
	// assigned but not yet active); a sync waits up to SettleMax for it to
	// pass instead of writing it to the Node. At fleet scale that
	// in-between patch was half again the API server's write load.
	Settling   func() bool
	SettleMax  time.Duration
	Registerer prometheus.Registerer
	Log        *slog.Logger
}

// DefaultSyncPeriod is a minute, not the kubelet's 10 s: the kubelet polls
// its inputs, statusd is told of each change, so the period only catches a
// change it missed, and waking up for it is most of an idle statusd's CPU.
const DefaultSyncPeriod = time.Minute

// Syncer keeps the Node in step with the setters.
type Syncer struct {
	o       Options
	trigger chan struct{}
	tick    chan struct{} // the period's: nothing to coalesce
	lister  corelisters.NodeLister
	nodes   nodeAPI
	m       metrics

	mu       sync.Mutex
	lastNode *corev1.Node // the newest Node we know of, from the cache or a patch response
	state    State
}

// State is what GetNodeStatus reports.
type State struct {
	Desired      *corev1.Node
	InSync       bool
	PatchesSent  uint64
	LastError    string
	SetterErrors map[string]string
}

// New builds a syncer.
func New(o Options) *Syncer {
	if o.Quiet == 0 {
		// Long enough to merge an assignment with its activation (two
		// record writes with fsyncs between them), short next to any target.
		o.Quiet = 25 * time.Millisecond
	}
	if o.SettleMax == 0 {
		o.SettleMax = time.Second
	}
	if o.MaxDelay == 0 {
		o.MaxDelay = 200 * time.Millisecond
	}
	if o.SyncPeriod == 0 {
		o.SyncPeriod = DefaultSyncPeriod
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Syncer{o: o, trigger: make(chan struct{}, 1), tick: make(chan struct{}, 1), nodes: newNodeAPI(o.Client), m: newMetrics(o.Registerer)}
}

// Trigger asks for a sync soon; it never blocks.
func (s *Syncer) Trigger() {
	select {
	case s.trigger <- struct{}{}:
	default:
	}
}

// periodic asks for the period's sync; it never blocks.
func (s *Syncer) periodic() {
	select {
	case s.tick <- struct{}{}:
	default:
	}
}

// Snapshot returns the current state.
func (s *Syncer) Snapshot() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.state
	return st
}

// Run registers (waits for the Node), then syncs until ctx ends.
func (s *Syncer) Run(ctx context.Context) error {
	if err := s.waitForNode(ctx); err != nil {
		return err
	}
	informer := cache.NewSharedIndexInformer(ownNodeListWatch(s.nodes, s.o.NodeName, s.o.Client), &corev1.Node{}, 0, cache.Indexers{})
	s.lister = corelisters.NewNodeLister(informer.GetIndexer())
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.Trigger() },
		UpdateFunc: func(any, any) { s.Trigger() },
		DeleteFunc: func(any) { s.Trigger() },
	})
	if err != nil {
		return err
	}
	informing, stopInformer := context.WithCancel(ctx)
	var informerDone sync.WaitGroup
	informerDone.Go(func() { informer.RunWithContext(informing) })
	defer func() { stopInformer(); informerDone.Wait() }()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return ctx.Err()
	}
	go wait.JitterUntil(s.periodic, s.o.SyncPeriod, 0.04, true, ctx.Done())

	retry := newBackoff()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.trigger:
			if !s.debounce(ctx) {
				return nil
			}
		case <-s.tick:
			// A burst of changes is coalesced by the debounce; the period's
			// sync has none to wait for, unless the state is settling.
			if s.o.Settling != nil && s.o.Settling() && !s.debounce(ctx) {
				return nil
			}
		}
		if err := s.SyncOnce(ctx); err != nil {
			delay := retryDelay(retry, err)
			s.o.Log.Warn("node status sync failed; retrying", "err", err, "retry_in", delay)
			time.AfterFunc(delay, s.Trigger)
			continue
		}
		retry = newBackoff()
	}
}

// newBackoff is the kubelet's registration backoff: 100 ms doubling to 7 s.
func newBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 7 * time.Second}
}

// retryDelay is how long to wait after err: the backoff's next step, or
// after a refusal as too many requests (429) a step that starts at the
// server's Retry-After and doubles, and then up to as long again at random.
// A whole fleet is refused at once (an API server restart, every agent
// starting, every node promoted a soak after one change); spread, and
// wider each time, its retries find the server ready instead of refusing
// them again.
func retryDelay(b *wait.Backoff, err error) time.Duration {
	if !apierrors.IsTooManyRequests(err) {
		return b.Step()
	}
	if seconds, ok := apierrors.SuggestsClientDelay(err); ok {
		b.Duration = max(b.Duration, time.Duration(seconds)*time.Second)
	}
	return wait.Jitter(b.Step(), 1)
}

// debounce waits until no trigger arrived for Quiet, or MaxDelay passed,
// and then while the state is settling, up to SettleMax in all.
func (s *Syncer) debounce(ctx context.Context) bool {
	settleEnd := time.Now().Add(s.o.SettleMax)
	deadline := time.NewTimer(s.o.MaxDelay)
	defer deadline.Stop()
	quiet := time.NewTimer(s.o.Quiet)
	defer quiet.Stop()
	ready := func() bool {
		return s.o.Settling == nil || !s.o.Settling() || !time.Now().Before(settleEnd)
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			if ready() {
				return true
			}
		case <-quiet.C:
			if ready() {
				return true
			}
			quiet.Reset(s.o.Quiet)
		case <-s.trigger:
			quiet.Reset(s.o.Quiet)
		}
	}
}

func (s *Syncer) waitForNode(ctx context.Context) error {
	b := newBackoff()
	for {
		_, err := s.nodes.Get(ctx, s.o.NodeName)
		if err == nil {
			return nil
		}
		delay := retryDelay(b, err)
		s.setError(fmt.Sprintf("waiting for Node %s: %v", s.o.NodeName, err))
		s.o.Log.Info("waiting for the Node to exist", "node", s.o.NodeName, "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
	}
}

// SyncOnce computes the desired Node and sends what differs.
func (s *Syncer) SyncOnce(ctx context.Context) error {
	start := time.Now()
	defer func() { s.m.syncSeconds.Observe(time.Since(start).Seconds()) }()
	node, err := s.currentNode()
	if err != nil {
		s.setError(err.Error())
		return err
	}
	desired := node.DeepCopy()
	setterErrs := map[string]string{}
	for _, st := range s.o.Setters() {
		if err := st.Set(ctx, desired); err != nil {
			// One setter's failure must not stop the others (kubelet rule).
			setterErrs[st.Name] = err.Error()
			s.o.Log.Error("setter failed", "setter", st.Name, "err", err)
		}
	}
	patch, err := Diff(node, desired)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.state.Desired, s.state.SetterErrors = desired, setterErrs
	s.mu.Unlock()
	if patch == nil {
		s.m.skipped.Inc()
		s.markSynced()
		return nil
	}
	updated, err := s.nodes.PatchStatus(ctx, s.o.NodeName, patch)
	if err != nil {
		return s.patchFailed(err)
	}
	s.sent(updated)
	s.markSynced()
	return nil
}

// currentNode is the newest Node we know: a patch response can be newer than
// the informer cache, and diffing against the cache then would resend.
func (s *Syncer) currentNode() (*corev1.Node, error) {
	cached, err := s.lister.Get(s.o.NodeName)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("node %s does not exist (deleted?)", s.o.NodeName)
	}
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastNode != nil && s.lastNode.UID == cached.UID && newer(s.lastNode.ResourceVersion, cached.ResourceVersion) {
		return s.lastNode, nil
	}
	s.lastNode = cached
	return cached, nil
}

func newer(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && x > y
}

func (s *Syncer) sent(updated *corev1.Node) {
	s.m.sent.Inc()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state.PatchesSent++
	if s.lastNode == nil || !newer(s.lastNode.ResourceVersion, updated.ResourceVersion) {
		s.lastNode = updated
	}
}

func (s *Syncer) patchFailed(err error) error {
	s.m.errors.Inc()
	err = fmt.Errorf("patch status of node %s: %w", s.o.NodeName, err)
	s.setError(err.Error())
	return err
}

func (s *Syncer) setError(msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state.InSync, s.state.LastError = false, msg
}

func (s *Syncer) markSynced() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state.InSync, s.state.LastError = true, ""
}

// Diff returns the strategic-merge patch that turns node into desired:
// only the conditions that differ (deletions as $patch: delete) and only the
// annotations that differ. Nil means nothing to send.
func Diff(node, desired *corev1.Node) ([]byte, error) {
	before := map[corev1.NodeConditionType]corev1.NodeCondition{}
	for _, c := range node.Status.Conditions {
		before[c.Type] = c
	}
	var changed []any
	after := map[corev1.NodeConditionType]bool{}
	for _, c := range desired.Status.Conditions {
		after[c.Type] = true
		if old, ok := before[c.Type]; !ok || !sameCondition(old, c) {
			changed = append(changed, c)
		}
	}
	for _, c := range node.Status.Conditions {
		if !after[c.Type] {
			changed = append(changed, map[string]any{"type": c.Type, "$patch": "delete"})
		}
	}
	annotations := map[string]any{}
	for k, v := range desired.Annotations {
		if old, ok := node.Annotations[k]; !ok || old != v {
			annotations[k] = v
		}
	}
	for k := range node.Annotations {
		if _, ok := desired.Annotations[k]; !ok {
			annotations[k] = nil
		}
	}
	if len(changed) == 0 && len(annotations) == 0 {
		return nil, nil
	}
	patch := map[string]any{}
	if len(changed) > 0 {
		patch["status"] = map[string]any{"conditions": changed}
	}
	if len(annotations) > 0 {
		patch["metadata"] = map[string]any{"annotations": annotations}
	}
	return json.Marshal(patch)
}

func sameCondition(a, b corev1.NodeCondition) bool {
	return a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message &&
		a.LastTransitionTime.Equal(&b.LastTransitionTime) && a.LastHeartbeatTime.Equal(&b.LastHeartbeatTime)
}

type metrics struct {
	sent, skipped, errors prometheus.Counter
	syncSeconds           prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) metrics {
	m := metrics{
		sent:        prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeconfig_statusd_patches_sent_total", Help: "Patches sent to the Node."}),
		skipped:     prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeconfig_statusd_patches_skipped_total", Help: "Syncs that found nothing to change and sent nothing."}),
		errors:      prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeconfig_statusd_patch_errors_total", Help: "Patches the API server refused or did not answer."}),
		syncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "nodeconfig_statusd_sync_seconds", Help: "Time of one sync.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
	}
	if reg != nil {
		reg.MustRegister(m.sent, m.skipped, m.errors, m.syncSeconds)
	}
	return m
}
