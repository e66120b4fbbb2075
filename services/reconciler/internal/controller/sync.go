package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/configcheck"
	"nodeconfig.io/services/reconciler/internal/policy"
	"nodeconfig.io/services/reconciler/internal/rollout"
)

// statusCoalesce groups NodeConfig status writes for nodes that change
// state close together. The status is a summary: a window of two seconds
// keeps its writes under one per node and change even when a small fleet
// steps one node a second (a soak of 1 s, one node in trial).
const statusCoalesce = 2 * time.Second

// validators maps a NodeConfig's spec.validator to checkpointd's; empty
// means YAML.
var validators = configcheck.Validators

// syncNode runs the lifecycle policy for one node.
func (c *Controller) syncNode(ctx context.Context, name string) (next time.Duration, err error) {
	// Counted before anything is read, so a sync counted after a Resync
	// read everything after it.
	ended := c.syncBegan(name)
	defer func() { ended(err) }()
	node, err := c.o.Nodes.Get(name)
	if apierrors.IsNotFound(err) {
		c.forgetNode(name)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	m, err := c.matching(node)
	if err != nil {
		return 0, err
	}
	nc, d, err := c.desired(ctx, node, m)
	if errors.Is(err, errConfigMapNotListed) {
		// No agent call, no error on the node: the listing's event brings
		// the node back in milliseconds, or the recheck if none does.
		c.listing.wait(name, c.nodeQ.Add)
		return 0, errWaits
	}
	c.listing.done(name)
	if err != nil {
		return 0, err
	}
	res := c.callAgent(ctx, name, d)
	if m.conflict() {
		res.State = nodeconfigv1.LifecycleState_LIFECYCLE_STATE_CONFLICT
	}
	c.noteRollbackSeen(name, &res)
	if d.Unjudged == nil || !errors.Is(res.Err, d.Unjudged) {
		// A held version is the NodeConfig's problem, not the node's: its
		// Degraded condition and one Warning on it say so, where one per
		// node would be thousands.
		c.warnOnNewError(name, &res)
	}
	c.emit(node, nc, res.Events)
	c.logTransitions(name, nc, res)
	next = c.record(node, nc, res, m.live)
	if res.Err != nil {
		c.o.Log.Info("node sync failed; retrying with backoff", "node", name, "err", res.Err, "retry_in", next)
		return next, res.Err
	}
	return next, nil
}

// noteRollbackSeen adds the Warning (and so the count) of a rollback the
// node did by itself, its gate mid-soak or its agent at start, which this
// sync only found: a node this reconciler knew in another state.
func (c *Controller) noteRollbackSeen(name string, res *policy.Result) {
	if res.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ROLLED_BACK || slices.ContainsFunc(res.Events, func(e policy.Event) bool { return e.Reason == v1alpha1.EventConfigRolledBack }) {
		return
	}
	prev, ok := c.NodeInfo(name)
	if !ok || prev.State == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ROLLED_BACK || prev.State == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_UNSPECIFIED {
		return
	}
	recs := res.Records
	if known := prev.Records; known.GetError().GetError().GetPhase() == nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE &&
		records.SameSource(known.GetAssigned().GetSource(), recs.GetAssigned().GetSource()) {
		// Told already: a failed sync in between (its agent out of reach)
		// kept the records that said so.
		return
	}
	res.Events = append(res.Events, policy.Event{Warning: true, Reason: v1alpha1.EventConfigRolledBack,
		Message: fmt.Sprintf("the node rolled %s back by itself: %s; it runs %s", records.Describe(recs.GetAssigned().GetSource()), recs.GetError().GetError().GetMessage(), records.Describe(recs.GetActive().GetSource()))})
}

// errConfigMapNotListed: the node's ConfigMap is not listed yet, so the
// cache cannot say whether it exists.
var errConfigMapNotListed = errors.New("the ConfigMap's watch has not listed it yet")

// configMapListingRecheck is when a node (or a NodeConfig's status) that
// waited for its ConfigMap's listing looks again, should no event have
// brought it back before.
const configMapListingRecheck = 5 * time.Second

// configMapListed says whether the cache can tell if ref's ConfigMap
// exists: its watch has listed it once.
func (c *Controller) configMapListed(ref *v1alpha1.ConfigMapSource) bool {
	return c.o.ConfigMapListed == nil || c.o.ConfigMapListed(ref.Namespace, ref.Name)
}

// matches are the NodeConfigs that select one node.
type matches struct {
	live, deleting []*v1alpha1.NodeConfig
	// invalidSelector says a live NodeConfig's selector does not parse:
	// it may be the one the node belongs to.
	invalidSelector bool
}

// conflict says more than one live NodeConfig selects the node.
func (m matches) conflict() bool { return len(m.live) > 1 }

// matching sorts the NodeConfigs that select node into live and deleting
// ones, by name.
func (c *Controller) matching(node *metav1.PartialObjectMetadata) (matches, error) {
	ncs, err := c.nodeConfigs()
	if err != nil {
		return matches{}, err
	}
	var m matches
	for _, nc := range ncs {
		if nc.DeletionTimestamp == nil && c.selectorErr(nc) != nil {
			m.invalidSelector = true
		}
		if !c.selects(nc, node) {
			continue
		}
		if nc.DeletionTimestamp != nil {
			m.deleting = append(m.deleting, nc)
		} else {
			m.live = append(m.live, nc)
		}
	}
	return m, nil
}

// desired picks the NodeConfig the node follows (nil: none) and what the
// policy is to do with the node. A NodeConfig being deleted yields to a
// live one; among the deleting ones, any abandon policy wins over a reset.
func (c *Controller) desired(ctx context.Context, node *metav1.PartialObjectMetadata, m matches) (*v1alpha1.NodeConfig, policy.Desired, error) {
	reset := policy.Desired{Mode: policy.ModeReset}
	leave := policy.Desired{Mode: policy.ModeLeave}
	switch {
	case m.conflict():
		// No change on the node; each NodeConfig reports the conflict.
		for _, nc := range m.live {
			c.ncQ.Add(nc.Name)
		}
		return nil, leave, nil
	case len(m.live) == 1:
		nc := m.live[0]
		if rollout.Lets(nc) {
			reset.Depart = c.departFor(node.Name)
			return nc, reset, nil
		}
		if err := c.clearAbandoned(ctx, node); err != nil {
			return nil, policy.Desired{}, err
		}
		d, err := c.desiredFor(ctx, nc, node)
		return nc, d, err
	case len(m.deleting) > 0:
		nc, d := m.deleting[0], reset
		d.Depart = c.departFor(node.Name)
		for _, deleting := range m.deleting {
			if deleting.Annotations[v1alpha1.AnnotationDeletionPolicy] == v1alpha1.DeletionPolicyAbandon {
				nc, d = deleting, leave
			}
		}
		return nc, d, nil
	case m.invalidSelector:
		// A NodeConfig whose selector does not parse may be the one this
		// node belongs to: leave the node as it is rather than reset it;
		// the NodeConfig reports its error.
		return nil, leave, nil
	default:
		d := reset
		if node.Annotations[v1alpha1.AnnotationAbandoned] != "" {
			d = leave
		}
		d.Depart = c.departFor(node.Name)
		return nil, d, nil
	}
}

// callAgent runs the policy against the node's checkpointd; an agent that
// cannot be reached fails the sync early, with nothing changed.
func (c *Controller) callAgent(ctx context.Context, name string, d policy.Desired) policy.Result {
	agent, release, err := c.o.Agents.For(name)
	if err != nil {
		return policy.Result{State: nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING, Err: fmt.Errorf("%s: %w", v1alpha1.NodeReasonCheckpointdUnavailable, err)}
	}
	defer release()
	rpcCtx, cancel := context.WithTimeout(ctx, c.o.RPCTimeout)
	defer cancel()
	return policy.Sync(rpcCtx, agent, d, c.o.Now())
}

// warnOnNewError adds a Warning for an early error the node did not have
// at its last sync: one per node per distinct error, not one per retry.
func (c *Controller) warnOnNewError(name string, res *policy.Result) {
	if res.Err == nil {
		return
	}
	if prev, ok := c.NodeInfo(name); ok && prev.Err == res.Err.Error() {
		return
	}
	res.Events = append(res.Events, policy.Event{Warning: true, Reason: v1alpha1.EventUpdateFailed, Message: res.Err.Error() + "; retrying with backoff, nothing rolled back"})
}

// pinned resolves a ConfigMap key from the cache only (the ConfigMap's add
// event wakes the nodes when it appears, so a retry never costs the API
// server a GET): the source pinned to its uid and resourceVersion, and its
// data. A missing ConfigMap or key is an error that says which, and why it
// cannot be read where the watch knows.
func (c *Controller) pinned(ref *v1alpha1.ConfigMapSource) (*nodeconfigv1.ConfigSource, map[string]string, error) {
	if !c.configMapListed(ref) {
		return nil, nil, fmt.Errorf("ConfigMap %s/%s: %w; try again in a moment", ref.Namespace, ref.Name, errConfigMapNotListed)
	}
	cm, err := c.o.ConfigMaps.ConfigMaps(ref.Namespace).Get(ref.Name)
	if err != nil {
		if c.o.ConfigMapErr != nil {
			if why := c.o.ConfigMapErr(ref.Namespace, ref.Name); why != nil {
				err = why
			}
		}
		return nil, nil, fmt.Errorf("ConfigMap %s/%s: %v", ref.Namespace, ref.Name, err)
	}
	if _, ok := cm.Data[ref.Key]; !ok {
		return nil, nil, fmt.Errorf("ConfigMap %s/%s has no key %q", ref.Namespace, ref.Name, ref.Key)
	}
	return &nodeconfigv1.ConfigSource{Namespace: cm.Namespace, Name: cm.Name, Uid: string(cm.UID), ResourceVersion: cm.ResourceVersion, Key: ref.Key}, cm.Data, nil
}

// desiredFor resolves a NodeConfig's source for a node from the caches
// (resolve); a missing ConfigMap, key or revision is an early error that
// heals when it appears, and one not listed yet is errConfigMapNotListed:
// no news at all.
func (c *Controller) desiredFor(ctx context.Context, nc *v1alpha1.NodeConfig, node *metav1.PartialObjectMetadata) (policy.Desired, error) {
	// Outside a maintenance window even a drift repair waits: it restarts
	// the kubelet.
	pol := c.book.Policy(nc)
	d := policy.Desired{Mode: policy.ModeUse, Validator: validators[nc.Spec.Validator], SoakSeconds: pol.SoakSeconds, NodeConfig: nc.Name, Health: pol.Health, Drain: pol.Drain,
		CheckDrift: c.book.Held(nc).Reason != v1alpha1.ReasonOutsideWindow}
	src, data, err := c.resolve(nc)
	if errors.Is(err, errConfigMapNotListed) {
		return policy.Desired{}, err
	}
	if err != nil {
		d.ResolveErr = &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY, Reason: v1alpha1.NodeReasonDownloadFailed, Message: err.Error()}
		return d, nil
	}
	if p := c.undoTarget(nc, src); p != nil {
		// The version halted: back to the revision before it; a node
		// still on the ConfigMap version it was read from needs no trial.
		src, data = p.Source, p.NodeData
		d.Runs = []*nodeconfigv1.ConfigSource{readFrom(p)}
	}
	d.Source = src
	refused, err := c.refusal(ctx, rollout.VersionOf(d.Source, d.Validator), d.Validator, data[src.Key])
	if refused != "" || err != nil {
		// Refused centrally, or not judged yet (the validator could not
		// run): no node is assigned it, every node stays on what it runs
		// (and a soaked one is still promoted), and the NodeConfig says
		// why. Not judged, the node's sync fails so that it is retried
		// with backoff.
		c.queueStatus(nc.Name)
		return policy.Desired{Mode: policy.ModeLeave, Unjudged: err}, nil
	}
	d.Data = data
	d.Admit = c.pace(nc, node.Name, rollout.Want{Source: d.Source, Validator: d.Validator, Runs: d.Runs})
	return d, nil
}

// record stores the sync's outcome and returns when to look again; after
// an early error, that is the rate limiter's next delay.
func (c *Controller) record(node *metav1.PartialObjectMetadata, nc *v1alpha1.NodeConfig, res policy.Result, selectedBy []*v1alpha1.NodeConfig) time.Duration {
	// A NodeConfig that lets its nodes go still selects them, but they
	// depart from it as from one that no longer selects them.
	following := nc != nil && !rollout.Lets(nc)
	leaving := ""
	if !following && records.ResetSoaking(res.Records, c.o.Now()) {
		if left := c.leaving(node.Name, res.Records.GetLastReset().GetFrom(), res.Records.GetLastReset().GetNodeConfig()); left != nil {
			leaving = left.Name
		}
	}
	c.mu.Lock()
	info := c.infoLocked(node.Name)
	prevState, prevNC := info.State, info.NodeConfig
	newGeneration := noteGenerations(info, selectedBy)
	c.noteResultLocked(info, nc, res)
	next := c.scheduleLocked(info, nc, res)
	curNC := info.NodeConfig
	changed := prevState != info.State || prevNC != curNC
	// Booked under c.mu: a status counts the node cache and the book at
	// one moment.
	freed := c.book.Synced(node.Name, rollout.Sync{
		Facts:     rollout.Facts{State: info.State, NodeConfig: info.NodeConfig, Records: info.Records},
		Failed:    res.Err != nil,
		Following: following,
		Leaving:   leaving,
	})
	c.mu.Unlock()

	for _, name := range freed {
		c.wakeWaiting(name)
	}
	if newGeneration {
		// The NodeConfigs may now observe their generation.
		for _, m := range selectedBy {
			c.queueStatus(m.Name)
		}
	}
	if changed {
		c.queueStatus(prevNC, curNC)
	}
	return next
}

// noteGenerations stores, per NodeConfig selecting the node, the
// generation the sync was computed for, and says whether any changed.
func noteGenerations(info *NodeInfo, selectedBy []*v1alpha1.NodeConfig) (changed bool) {
	generations := make([]computedAt, 0, len(selectedBy))
	for _, m := range selectedBy {
		generations = append(generations, computedAt{m.UID, m.Generation})
	}
	if slices.Equal(generations, info.Generations) {
		return false
	}
	info.Generations = generations
	return true
}

// noteResultLocked stores the sync's state, records, NodeConfig and error
// (with the retry it brings, failedLocked).
func (c *Controller) noteResultLocked(info *NodeInfo, nc *v1alpha1.NodeConfig, res policy.Result) {
	info.State = res.State
	if res.Records != nil {
		c.internSources(res.Records)
		info.Records = res.Records
	}
	info.NodeConfig = ""
	if nc != nil {
		info.NodeConfig = nc.Name
	}
	if res.Err != nil {
		info.Err = res.Err.Error()
		c.failedLocked(info, c.o.Now())
	} else {
		info.Err, info.Failures, info.Backoff, info.retryDue = "", 0, 0, time.Time{}
	}
}

// scheduleLocked says when to sync the node again, and notes it: after an
// early error, the retry noteResultLocked scheduled; otherwise when the
// policy asks, or the NodeConfig's periodic reconcile.
func (c *Controller) scheduleLocked(info *NodeInfo, nc *v1alpha1.NodeConfig, res policy.Result) time.Duration {
	if res.Err != nil {
		// Never 0: processNext would take that for no delay and ask the
		// rate limiter for one, a failure counted twice.
		return max(info.NextReconcile.Sub(c.o.Now()), time.Millisecond)
	}
	var next time.Duration
	switch {
	case res.RequeueAfter > 0:
		next = res.RequeueAfter
	case res.State == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_WAITING:
		// Woken when a trial ends; this is only a safety net.
		next = 30 * time.Second
	default:
		if iv := reconcileInterval(nc); iv > 0 {
			next = wait.Jitter(iv/2, 2) // 0.5x to 1.5x the mean
		}
	}
	if next > 0 {
		info.NextReconcile = c.o.Now().Add(next)
	} else {
		info.NextReconcile = time.Time{}
	}
	return next
}

// queueStatus queues a status write of each named NodeConfig; node
// changes within statusCoalesce share one write.
func (c *Controller) queueStatus(ncNames ...string) {
	for _, name := range ncNames {
		if name != "" {
			c.ncQ.AddAfter(name, statusCoalesce)
		}
	}
}

func (c *Controller) forgetNode(name string) {
	c.mu.Lock()
	info := c.nodes[name]
	departed := c.book.Forget(name)
	delete(c.nodes, name)
	delete(c.syncs, name)
	c.mu.Unlock()
	c.nodeQ.Forget(name)
	c.o.Agents.Forget(name)
	if info != nil && info.NodeConfig != "" {
		c.ncQ.Add(info.NodeConfig)
		c.wakeWaiting(info.NodeConfig)
	}
	if departed != "" {
		c.wakeWaiting(departed)
	}
}

// clearAbandoned removes the abandon mark once a NodeConfig selects the
// node again.
func (c *Controller) clearAbandoned(ctx context.Context, node *metav1.PartialObjectMetadata) error {
	if node.Annotations[v1alpha1.AnnotationAbandoned] == "" {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{v1alpha1.AnnotationAbandoned: nil}}})
	_, err := c.o.Kube.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}
