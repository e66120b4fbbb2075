package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/pacing"
	"nodeconfig.io/services/reconciler/internal/policy"
)

// statusCoalesce groups NodeConfig status writes for nodes that change
// state close together.
const statusCoalesce = time.Second

var validators = map[string]nodeconfigv1.Validator{
	"":        nodeconfigv1.Validator_VALIDATOR_YAML,
	"yaml":    nodeconfigv1.Validator_VALIDATOR_YAML,
	"json":    nodeconfigv1.Validator_VALIDATOR_JSON,
	"kubelet": nodeconfigv1.Validator_VALIDATOR_KUBELET,
	"none":    nodeconfigv1.Validator_VALIDATOR_NONE,
}

// syncNode runs the lifecycle policy for one node.
func (c *Controller) syncNode(ctx context.Context, name string) (time.Duration, error) {
	// Counted before anything is read, so a sync counted after a Resync
	// read everything after it.
	defer c.syncBegan(name)()
	node, err := c.o.Nodes.Get(name)
	if apierrors.IsNotFound(err) {
		c.forgetNode(name)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	ncs, err := c.nodeConfigs()
	if err != nil {
		return 0, err
	}
	var matches []*v1alpha1.NodeConfig
	invalidSelector := false
	for _, nc := range ncs {
		if nc.DeletionTimestamp == nil && c.selectorErr(nc) != nil {
			invalidSelector = true
		}
		if c.selects(nc, node) {
			matches = append(matches, nc)
		}
	}

	// A NodeConfig being deleted yields to a live one; among the deleting
	// ones, any abandon policy wins over a reset.
	var live, deleting []*v1alpha1.NodeConfig
	for _, m := range matches {
		if m.DeletionTimestamp != nil {
			deleting = append(deleting, m)
		} else {
			live = append(live, m)
		}
	}
	var nc *v1alpha1.NodeConfig
	d := policy.Desired{Mode: policy.ModeReset}
	conflict := len(live) > 1
	switch {
	case conflict:
		// No change on the node; each NodeConfig reports the conflict.
		d.Mode = policy.ModeLeave
		for _, m := range live {
			c.ncQ.Add(m.Name)
		}
	case len(live) == 1:
		nc = live[0]
		if nc.Spec.Source == nil || nc.Spec.Source.ConfigMap == nil {
			break
		}
		if err := c.clearAbandoned(ctx, node); err != nil {
			return 0, err
		}
		d = c.desiredFor(nc, node)
	case len(deleting) > 0:
		nc = deleting[0]
		for _, m := range deleting {
			if m.Annotations[v1alpha1.AnnotationDeletionPolicy] == v1alpha1.DeletionPolicyAbandon {
				nc, d.Mode = m, policy.ModeLeave
			}
		}
	case invalidSelector:
		// A NodeConfig whose selector does not parse may be the one this
		// node belongs to: leave the node as it is rather than reset it;
		// the NodeConfig reports its error.
		d.Mode = policy.ModeLeave
	default:
		if node.Annotations[v1alpha1.AnnotationAbandoned] != "" {
			d.Mode = policy.ModeLeave
		}
		d.Depart = c.departFor(name)
	}

	agent, release, err := c.o.Agents.For(name)
	var res policy.Result
	if err != nil {
		res = policy.Result{State: nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING, Err: fmt.Errorf("%s: %w", policy.ReasonAgentUnavailable, err)}
	} else {
		rpcCtx, cancel := context.WithTimeout(ctx, c.o.RPCTimeout)
		res = policy.Sync(rpcCtx, agent, d, c.o.Now())
		cancel()
		release()
	}
	if conflict {
		res.State = nodeconfigv1.LifecycleState_LIFECYCLE_STATE_CONFLICT
	}
	if res.Err != nil {
		// One Warning per node per distinct early error, not per retry.
		if prev, ok := c.NodeInfo(name); !ok || prev.Err != res.Err.Error() {
			res.Events = append(res.Events, policy.Event{Warning: true, Reason: policy.EventFailed, Message: res.Err.Error() + "; retrying with backoff, nothing rolled back"})
		}
	}
	c.emit(node, nc, res.Events)
	next := c.record(node, nc, res, live)
	if res.Err != nil {
		c.o.Log.Info("node sync failed; retrying with backoff", "node", name, "err", res.Err, "retry_in", next)
		return next, res.Err
	}
	return next, nil
}

// pinned resolves a ConfigMap key from the cache only (the ConfigMap's add
// event wakes the nodes when it appears, so a retry never costs the API
// server a GET): the source pinned to its uid and resourceVersion, and its
// data. A missing ConfigMap or key is an error that says which, and why it
// cannot be read where the watch knows.
func (c *Controller) pinned(ref *v1alpha1.ConfigMapSource) (*nodeconfigv1.ConfigSource, map[string]string, error) {
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

// desiredFor resolves a NodeConfig's source for a node from the cache; a
// missing ConfigMap or key is an early error that heals when it appears.
func (c *Controller) desiredFor(nc *v1alpha1.NodeConfig, node *corev1.Node) policy.Desired {
	ref := nc.Spec.Source.ConfigMap
	// Outside a maintenance window even a drift repair waits: it restarts
	// the kubelet.
	d := policy.Desired{Mode: policy.ModeUse, Validator: validators[nc.Spec.Validator], SoakSeconds: soakSeconds(nc), NodeConfig: nc.Name,
		CheckDrift: c.trialsHeld(nc).reason != v1alpha1.ReasonOutsideWindow}
	src, data, err := c.pinned(ref)
	if err != nil {
		d.ResolveErr = &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY, Reason: policy.ReasonDownloadFailed, Message: err.Error()}
		return d
	}
	d.Source = src
	if c.refusal(versionOf(d.Source, d.Validator), d.Validator, data[ref.Key]) != "" {
		// Refused centrally: no node is assigned it, every node stays on
		// what it runs (and a soaked one is still promoted); the
		// NodeConfig says why.
		return policy.Desired{Mode: policy.ModeLeave}
	}
	d.Data = data
	d.Admit = c.pace(nc, node.Name, versionOf(d.Source, d.Validator))
	return d
}

// pace applies the NodeConfig's rollout limits to one node and one version.
// The count and the reservation happen under one lock, so two workers can
// never both take the last place in the trial.
func (c *Controller) pace(nc *v1alpha1.NodeConfig, node string, v version) func() policy.Admission {
	return func() policy.Admission {
		seen := c.everyNodeSeen(node)
		selected := c.selectedNodes(nc)
		held := c.trialsHeld(nc)
		c.mu.Lock()
		defer c.mu.Unlock()
		// Nodes leaving nc share its trial (see depart.go).
		limit := pacing.MaxInTrial(nc.Spec.Rollout.MaxInTrial, len(selected)+len(c.departing[nc.Name]))
		// Counted before the wait for unseen nodes: a halt is durable and
		// holds whatever the nodes not seen yet say.
		if pacing.Halted(c.haltCountLocked(nc, v), pacing.MaxFailures(nc.Spec.Rollout.MaxFailures)) {
			return policy.Halted
		}
		if held.reason != "" {
			return policy.Wait
		}
		if !seen {
			// A node not synced since this reconciler started may be soaking
			// a reset that left nc.
			return policy.Wait
		}
		inTrial := c.departuresInTrialLocked(nc.Name, node) + c.onTrialLocked(nc.Name, node)
		if inTrial >= limit {
			return policy.Wait
		}
		info := c.infoLocked(node)
		info.Admitted, info.AdmittedFor = true, nc.Name
		c.reindexLocked(info)
		return policy.Admitted
	}
}

// selectedNodes names the nodes nc selects; callers must not modify the
// slice. Admission asks on every node sync, so the answer is kept until a
// Node comes, goes or is relabelled (listing all nodes per sync was half
// the reconciler's CPU at 5,000 nodes).
func (c *Controller) selectedNodes(nc *v1alpha1.NodeConfig) []string {
	version := c.nodesVersion.Load() // before listing: a change during it makes the entry stale
	c.selMu.Lock()
	e := c.selectionLocked(nc)
	if e.listed && e.version == version {
		names := e.names
		c.selMu.Unlock()
		return names
	}
	sel := e.selector
	c.selMu.Unlock()
	nodes, err := c.o.Nodes.List(sel)
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	c.selMu.Lock()
	e.listed, e.version, e.names = true, version, names
	c.selMu.Unlock()
	return names
}

// record stores the sync's outcome and returns when to look again; after
// an early error, that is the rate limiter's next delay.
func (c *Controller) record(node *corev1.Node, nc *v1alpha1.NodeConfig, res policy.Result, selectedBy []*v1alpha1.NodeConfig) time.Duration {
	var leaving *v1alpha1.NodeConfig
	if nc == nil && res.Records.ResetSoaking(c.o.Now()) {
		leaving = c.leaving(node.Name, res.Records.GetLastReset().GetFrom(), res.Records.GetLastReset().GetNodeConfig())
	}
	c.mu.Lock()
	info := c.infoLocked(node.Name)
	prevState, prevNC := info.State, info.NodeConfig
	generations := make(map[types.UID]int64, len(selectedBy))
	for _, m := range selectedBy {
		generations[m.UID] = m.Generation
	}
	newGeneration := !maps.Equal(generations, info.Generations)
	info.Generations = generations
	info.State = res.State
	if res.Records != nil {
		info.Records = res.Records
	}
	info.NodeConfig = ""
	if nc != nil {
		info.NodeConfig = nc.Name
	}
	if res.Err != nil {
		info.Err = res.Err.Error()
		info.Backoff = c.nodeRetry.When(node.Name)
		info.Failures = c.nodeRetry.NumRequeues(node.Name)
		info.NextReconcile = c.o.Now().Add(info.Backoff)
	} else {
		info.Err, info.Failures, info.Backoff = "", 0, 0
	}
	switch res.State {
	case nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING, nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING,
		nodeconfigv1.LifecycleState_LIFECYCLE_STATE_UNSPECIFIED:
	default:
		// The trial, if any, is over.
		info.Admitted, info.AdmittedFor = false, ""
	}
	c.reindexLocked(info)
	next := info.Backoff
	if res.Err == nil {
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
	}
	changed := prevState != info.State || prevNC != info.NodeConfig
	freed := c.departureAfterSyncLocked(info, nc, leaving)
	c.mu.Unlock()

	if freed != "" {
		c.wakeWaiting(freed)
	}

	if newGeneration {
		// The NodeConfigs may now observe their generation.
		for _, m := range selectedBy {
			c.ncQ.AddAfter(m.Name, statusCoalesce)
		}
	}
	if changed {
		for _, name := range []string{prevNC, info.NodeConfig} {
			if name != "" {
				// Node changes within a second share one status write.
				c.ncQ.AddAfter(name, statusCoalesce)
			}
		}
		if prevState == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING && nc != nil {
			c.wakeWaiting(nc.Name)
		}
	}
	return next
}

// wakeWaiting enqueues the nodes pacing held back, now that a slot is free.
func (c *Controller) wakeWaiting(ncName string) {
	c.mu.Lock()
	var waiting []string
	for name, n := range c.nodes {
		if (n.NodeConfig == ncName || n.DepartingFrom == ncName) && n.State == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_WAITING {
			waiting = append(waiting, name)
		}
	}
	c.mu.Unlock()
	for _, name := range waiting {
		c.nodeQ.Add(name)
	}
}

func (c *Controller) infoLocked(name string) *NodeInfo {
	info := c.nodes[name]
	if info == nil {
		info = &NodeInfo{Name: name}
		c.nodes[name] = info
	}
	return info
}

func (c *Controller) forgetNode(name string) {
	c.mu.Lock()
	info := c.nodes[name]
	var departed string
	if info != nil {
		departed = info.DepartingFrom
		c.departLocked(name, "")
		info.Admitted, info.AdmittedFor, info.State = false, "", nodeconfigv1.LifecycleState_LIFECYCLE_STATE_UNSPECIFIED
		c.reindexLocked(info)
	}
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
func (c *Controller) clearAbandoned(ctx context.Context, node *corev1.Node) error {
	if node.Annotations[v1alpha1.AnnotationAbandoned] == "" {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{v1alpha1.AnnotationAbandoned: nil}}})
	_, err := c.o.Kube.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}
