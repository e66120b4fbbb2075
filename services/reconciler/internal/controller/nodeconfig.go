package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/pacing"
	"nodeconfig.io/services/reconciler/internal/rollout"
)

// syncNodeConfig keeps the finalizer, handles deletion, and writes status
// (only when it changed).
func (c *Controller) syncNodeConfig(ctx context.Context, name string) (time.Duration, error) {
	nc, err := c.o.NodeConfigs.Get(name)
	if apierrors.IsNotFound(err) {
		c.metrics.forgetNodeConfig(name)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	client := c.o.NodeConfigClient.NodeConfigV1alpha1().NodeConfigs()
	if nc.DeletionTimestamp != nil {
		return c.finalize(ctx, nc)
	}
	if !slices.Contains(nc.Finalizers, v1alpha1.Finalizer) {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"finalizers": append(slices.Clone(nc.Finalizers), v1alpha1.Finalizer), "resourceVersion": nc.ResourceVersion,
		}})
		if _, err := client.Patch(ctx, nc.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return 0, fmt.Errorf("add finalizer: %w", err)
		}
		// The update event brings us back with the new object.
		return 0, nil
	}
	if s := nc.Spec.Source; s != nil && s.ConfigMap != nil && !c.configMapListed(s.ConfigMap) {
		// The status would read the ConfigMap's absence from the cache as
		// news (a halted version without a resourceVersion); the nodes'
		// syncs after the listing queue it again.
		return configMapListingRecheck, nil
	}
	status, unseen := c.computeStatus(nc)
	if unseen > 0 && len(nc.Status.Conditions) > 0 && c.holdingStatuses() {
		// A status counted without some of the nodes (a new reconciler
		// after a fail-over has seen none) would say less than the stored
		// one: zero counts, Ready=False, and a RolloutComplete event again
		// when the nodes are seen. The stored status stands until then;
		// each unseen node's first sync queues this one again.
		return unseenRecheck, nil
	}
	c.metrics.observeNodeConfig(nc.Name, status)
	// Outside every window, look again when the next one opens: the
	// status write then wakes the waiting nodes.
	var requeue time.Duration
	if status.NextWindow != nil {
		requeue = max(status.NextWindow.Sub(c.o.Now()), time.Second)
	}
	// The history is a record, not a gate: a failed write of it holds
	// neither the status nor the nodes.
	if err := c.syncHistory(ctx, nc, status); err != nil {
		c.historyErr(nc, err)
		if requeue == 0 || requeue > historyRetry {
			requeue = historyRetry
		}
	}
	if reflect.DeepEqual(status, nc.Status) {
		return requeue, nil
	}
	wasReady := meta.IsStatusConditionTrue(nc.Status.Conditions, v1alpha1.ConditionReady)
	prevDegraded := meta.FindStatusCondition(nc.Status.Conditions, v1alpha1.ConditionDegraded)
	updated := nc.DeepCopy() // nc is the cache's
	updated.Status = status
	if _, err := client.UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			// A newer object is on its way through the informer.
			return time.Second, nil
		}
		return 0, fmt.Errorf("update status: %w", err)
	}
	// One Warning per distinct problem with the NodeConfig itself.
	if d := meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionDegraded); d != nil &&
		(d.Reason == v1alpha1.ReasonInvalidSelector || d.Reason == v1alpha1.ReasonInvalidReconcileInterval || d.Reason == v1alpha1.ReasonInvalidWindow || d.Reason == v1alpha1.ReasonInvalidHealthGate ||
			d.Reason == v1alpha1.ReasonConfigRefused || d.Reason == v1alpha1.ReasonValidationUnavailable) &&
		(prevDegraded == nil || prevDegraded.Reason != d.Reason || prevDegraded.Message != d.Message) && c.o.Recorder != nil {
		c.o.Recorder.Event(nc, corev1.EventTypeWarning, d.Reason, d.Message)
	}
	// One Normal event per rollout, however many nodes it took.
	if !wasReady && meta.IsStatusConditionTrue(status.Conditions, v1alpha1.ConditionReady) && c.o.Recorder != nil {
		c.o.Recorder.Eventf(nc, corev1.EventTypeNormal, v1alpha1.EventRolloutComplete,
			"all %d selected node(s) have this config active and last-known-good", status.Selected)
	}
	return requeue, nil
}

// unseenRecheck is when a NodeConfig whose status waits for nodes not
// synced yet looks again, should no node sync have queued it before.
const unseenRecheck = 5 * time.Second

// statusHold bounds how long after its first status sync a reconciler
// keeps the stored statuses while nodes are not synced yet: a node whose
// syncs never end (a patch refused for good) must not freeze them.
const statusHold = 5 * time.Minute

// holdingStatuses says whether stored statuses still stand for nodes not
// synced yet: within statusHold of this reconciler's first status sync.
func (c *Controller) holdingStatuses() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.o.Now()
	if c.firstStatusSync.IsZero() {
		c.firstStatusSync = now
	}
	return now.Sub(c.firstStatusSync) < statusHold
}

// computeStatus counts the selected nodes by state and sets the
// conditions; unseen counts the selected nodes not synced yet.
func (c *Controller) computeStatus(nc *v1alpha1.NodeConfig) (st v1alpha1.NodeConfigStatus, unseen int) {
	st = v1alpha1.NodeConfigStatus{ObservedGeneration: nc.Generation, Conditions: slices.Clone(nc.Status.Conditions)}
	set := func(t string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: st.ObservedGeneration})
	}
	if err := c.selectorErr(nc); err != nil {
		msg := fmt.Sprintf("spec.nodeSelector is invalid: %v; no node is changed until it is fixed", err)
		set(v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonInvalidSelector, msg)
		set(v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonInvalidSelector, msg)
		set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidSelector, msg)
		return st, 0
	}
	selected := c.selectedNodes(nc)
	st.Selected = int32(len(selected))
	conflicts, unknown, behind := 0, 0, 0
	anyHalted := false
	c.mu.Lock()
	for _, name := range selected {
		n := c.nodes[name]
		if n == nil {
			unknown++
			continue
		}
		if n.generation(nc.UID) != nc.Generation {
			behind++
		}
		switch n.State {
		case nodeconfigv1.LifecycleState_LIFECYCLE_STATE_WAITING, nodeconfigv1.LifecycleState_LIFECYCLE_STATE_HALTED:
			st.Waiting++
		case nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING:
			st.Soaking++
		case nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ACTIVE, nodeconfigv1.LifecycleState_LIFECYCLE_STATE_LOCAL_DEFAULT:
			st.Active++
		case nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ROLLED_BACK:
			st.RolledBack++
		case nodeconfigv1.LifecycleState_LIFECYCLE_STATE_CONFLICT:
			conflicts++
		default:
			st.Failing++
		}
		if n.State == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_HALTED {
			anyHalted = true
		}
	}
	// Under c.mu, so the book's rollbacks are those of the states counted.
	st.RolledBackVersions = c.book.RolledBackVersions(nc, selected)
	c.mu.Unlock()
	// Resolved once: the version, the undo and the status's note all ask.
	src := c.currentSource(nc)
	current, haveCurrent := versionOf(nc, src)
	failedCurrent := 0
	if haveCurrent {
		failedCurrent = rollout.Failures(st.RolledBackVersions, current)
	}
	if unknown > 0 || behind > 0 {
		// Counted from node states of an older generation (or none): the
		// status does not observe this generation yet, and is not Ready.
		st.ObservedGeneration = nc.Status.ObservedGeneration
	}

	pol := c.book.Policy(nc)
	limit := pol.MaxInTrial(len(selected))
	held := c.book.Held(nc)
	maxFailures := pol.MaxFailures
	halted := pacing.Halted(failedCurrent, maxFailures) || (anyHalted && !haveCurrent)
	done := int(st.Active) == len(selected) && unknown == 0 && behind == 0
	// blocked is the reason the current version is assigned to no node.
	blocked := ""
	switch {
	case conflicts > 0:
		set(v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonSelectorConflict,
			fmt.Sprintf("%d selected node(s) are also selected by another NodeConfig and are left unchanged", conflicts))
	case halted:
		set(v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonRolloutHalted,
			fmt.Sprintf("%d node(s) rolled back from resourceVersion %s of ConfigMap %s/%s key %s with validator %s (maxFailures %d): its rollout is halted until the ConfigMap, the key or the validator changes",
				failedCurrent, current.ResourceVersion, nc.Spec.Source.ConfigMap.Namespace, nc.Spec.Source.ConfigMap.Name, current.Key, current.Validator, maxFailures))
	case haveCurrent && c.knownRefusal(current) != "":
		blocked = v1alpha1.ReasonConfigRefused
		set(v1alpha1.ConditionDegraded, metav1.ConditionTrue, blocked,
			fmt.Sprintf("resourceVersion %s of ConfigMap %s/%s key %s fails validator %s: %s; it is assigned to no node, and every node keeps its config",
				current.ResourceVersion, nc.Spec.Source.ConfigMap.Namespace, nc.Spec.Source.ConfigMap.Name, current.Key, current.Validator, c.knownRefusal(current)))
	case haveCurrent && c.unjudged(current) != nil:
		blocked = v1alpha1.ReasonValidationUnavailable
		set(v1alpha1.ConditionDegraded, metav1.ConditionTrue, blocked,
			fmt.Sprintf("resourceVersion %s of ConfigMap %s/%s key %s is not judged yet: %v; it is assigned to no node until the validator runs (retried with backoff), and every node keeps its config",
				current.ResourceVersion, nc.Spec.Source.ConfigMap.Namespace, nc.Spec.Source.ConfigMap.Name, current.Key, c.unjudged(current)))
	case st.RolledBack > 0 || st.Failing > 0:
		set(v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonNodesFailing,
			fmt.Sprintf("%d node(s) rolled back, %d failing with retries", st.RolledBack, st.Failing))
	case reconcileIntervalErr(nc) != nil:
		set(v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonInvalidReconcileInterval, reconcileIntervalErr(nc).Error())
	case held.Reason == v1alpha1.ReasonInvalidWindow || held.Reason == v1alpha1.ReasonInvalidHealthGate:
		set(v1alpha1.ConditionDegraded, metav1.ConditionTrue, held.Reason, held.Message)
	default:
		set(v1alpha1.ConditionDegraded, metav1.ConditionFalse, v1alpha1.ReasonAsExpected, "no node rolled back or failing")
	}
	if blocked != "" {
		d := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionDegraded)
		set(v1alpha1.ConditionProgressing, metav1.ConditionFalse, blocked, d.Message)
		set(v1alpha1.ConditionReady, metav1.ConditionFalse, blocked, d.Message)
	} else if done {
		set(v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonRolloutComplete, fmt.Sprintf("all %d selected node(s) use this config", len(selected)))
		set(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonAllNodesActive, fmt.Sprintf("all %d selected node(s) have this config active and last-known-good", len(selected)))
	} else {
		msg := fmt.Sprintf("%d soaking, %d waiting (maxInTrial %d), %d active of %d selected", st.Soaking, st.Waiting, limit, st.Active, len(selected))
		if unknown+behind > 0 {
			msg += fmt.Sprintf("; %d not yet synced at generation %d", unknown+behind, nc.Generation)
		}
		progressing, reason := metav1.ConditionTrue, v1alpha1.ReasonRollingOut
		if halted {
			progressing = metav1.ConditionFalse
			if p := c.undoTarget(nc, src); p != nil {
				var left []string
				reason, msg, left = c.undoProgress(p, selected)
				if len(left) > 0 {
					progressing = metav1.ConditionTrue
					// Promoted nodes are not synced again by themselves.
					for _, name := range left {
						c.nodeQ.Add(name)
					}
				}
			}
		}
		if held.Reason != "" && st.Waiting > 0 {
			// Held: the reason says why nothing new starts.
			progressing, reason, msg = metav1.ConditionFalse, held.Reason, msg+"; "+held.Message
			if !held.Next.IsZero() {
				st.NextWindow = &metav1.Time{Time: held.Next}
			}
		}
		set(v1alpha1.ConditionProgressing, progressing, reason, msg)
		set(v1alpha1.ConditionReady, metav1.ConditionFalse, reason, msg)
	}
	waves, wavesNote := c.waveStatus(nc, selected, src)
	st.Waves = waves
	for _, note := range []string{c.sameBytesNote(nc, src), wavesNote} {
		if note != "" {
			p := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionProgressing)
			set(v1alpha1.ConditionProgressing, p.Status, p.Reason, p.Message+"; "+note)
		}
	}
	return st, unknown
}

// sameBytesNote is the status's line for a ConfigMap edit that changed
// nothing the nodes read (sameBytes): "" when there is none.
func (c *Controller) sameBytesNote(nc *v1alpha1.NodeConfig, used *nodeconfigv1.ConfigSource) string {
	if nc.Spec.Source == nil || nc.Spec.Source.ConfigMap == nil || nc.Spec.Source.Revision != nil {
		return ""
	}
	now, _, err := c.pinned(nc.Spec.Source.ConfigMap)
	if err != nil {
		return ""
	}
	if used == nil || used.GetResourceVersion() == now.GetResourceVersion() {
		return ""
	}
	return fmt.Sprintf("ConfigMap %s/%s changed (resourceVersion %s) but not key %s: still resourceVersion %s's bytes, so no new version and no trial",
		now.GetNamespace(), now.GetName(), now.GetResourceVersion(), now.GetKey(), used.GetResourceVersion())
}

// finalize resets (or abandons) the selected nodes, then lets the
// NodeConfig go.
func (c *Controller) finalize(ctx context.Context, nc *v1alpha1.NodeConfig) (time.Duration, error) {
	if !slices.Contains(nc.Finalizers, v1alpha1.Finalizer) {
		return 0, nil
	}
	abandon := nc.Annotations[v1alpha1.AnnotationDeletionPolicy] == v1alpha1.DeletionPolicyAbandon
	for _, name := range c.selectedNodes(nc) {
		if abandon {
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{v1alpha1.AnnotationAbandoned: nc.Name}}})
			if _, err := c.o.Kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return 0, fmt.Errorf("mark node %s abandoned: %w", name, err)
			}
			continue
		}
		info, ok := c.NodeInfo(name)
		handedOver := ok && info.NodeConfig != "" && info.NodeConfig != nc.Name
		if !handedOver && (!ok || (info.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_LOCAL_DEFAULT && info.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING)) {
			// Its node sync resets it and brings us back here.
			c.nodeQ.Add(name)
			return 2 * time.Second, nil
		}
	}
	finalizers := slices.DeleteFunc(slices.Clone(nc.Finalizers), func(f string) bool { return f == v1alpha1.Finalizer })
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": finalizers, "resourceVersion": nc.ResourceVersion}})
	if _, err := c.o.NodeConfigClient.NodeConfigV1alpha1().NodeConfigs().Patch(ctx, nc.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return 0, fmt.Errorf("remove finalizer: %w", err)
	}
	return 0, nil
}
