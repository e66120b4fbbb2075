package controller

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/agents"
)

// HistoryHandler is the revisions informer's event handler; it only
// enqueues.
func (c *Controller) HistoryHandler() cache.ResourceEventHandler { return c.historyHandler() }

// Handlers returns the informer event handlers; they only enqueue.
func (c *Controller) Handlers() (nodes, configMaps, nodeConfigs, pods cache.ResourceEventHandler) {
	nodes = cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.nodesChanged(); c.enqueueNode(obj) },
		UpdateFunc: func(old, cur any) {
			o, n := old.(*metav1.PartialObjectMetadata), cur.(*metav1.PartialObjectMetadata)
			if !labels.Equals(o.Labels, n.Labels) {
				c.nodesChanged()
			}
			// statusd's own patches concern the policy only when the node's
			// error changes (a rollback the node did by itself mid-soak);
			// labels and the abandon mark always do.
			if !labels.Equals(o.Labels, n.Labels) || o.Annotations[v1alpha1.AnnotationAbandoned] != n.Annotations[v1alpha1.AnnotationAbandoned] ||
				reportedErrorChanged(o, n) {
				c.enqueueNode(cur)
			}
		},
		DeleteFunc: func(obj any) { c.nodesChanged(); c.enqueueNode(obj) },
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
		AddFunc: func(obj any) { c.enqueuePodNode(obj) },
		UpdateFunc: func(old, cur any) {
			c.dropBackoffOnReady(old, cur)
			c.enqueuePodNode(cur)
		},
	}
	return
}

// enqueueNode enqueues the Node itself, also from a deletion tombstone.
func (c *Controller) enqueueNode(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if n, ok := obj.(*metav1.PartialObjectMetadata); ok {
		c.nodeQ.Add(n.Name)
	}
}

// enqueuePodNode enqueues the node of an agent Pod: its agent's address
// or readiness may have changed.
func (c *Controller) enqueuePodNode(obj any) {
	if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
		c.nodeQ.Add(p.Spec.NodeName)
	}
}

// dropBackoffOnReady drops the backoff of a node whose agent Pod turned
// Ready: the agent is back, so the sync the update brings is its retry,
// and should the agent still refuse a moment longer, the next try comes
// after the base delay rather than after what the outage earned.
func (c *Controller) dropBackoffOnReady(old, cur any) {
	o, ok1 := old.(*corev1.Pod)
	n, ok2 := cur.(*corev1.Pod)
	if ok1 && ok2 && n.Spec.NodeName != "" && !agents.PodReady(o) && agents.PodReady(n) {
		c.dropBackoff(n.Spec.NodeName)
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
			// Its status says so even when no node changes (an edit that
			// keeps the key's bytes).
			c.queueStatus(nc.Name)
		}
	}
}

// enqueueForNodeConfig enqueues a NodeConfig's status and the nodes it
// selected before and after the change.
func (c *Controller) enqueueForNodeConfig(old, cur any) {
	if old != nil && cur != nil {
		o, oerr := toNodeConfig(old)
		n, nerr := toNodeConfig(cur)
		if oerr == nil && nerr == nil && onlyStatusChanged(o, n) {
			// Our own status write: the nodes' policy did not change, so
			// only the nodes held back by pacing look again; re-syncing
			// every selected node on every status write would make each
			// write cost a sync of the whole NodeConfig. The status is
			// counted again after statusCoalesce like any node change's:
			// counted at once, each write would bring the next, as nodes
			// change during a rollout.
			c.queueStatus(n.Name)
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

// reportedErrorChanged says whether the error a node reports in its
// config-status annotation changed: the cheap string comparison first, as
// most Node updates leave the annotation alone.
func reportedErrorChanged(o, n *metav1.PartialObjectMetadata) bool {
	before, after := o.Annotations[v1alpha1.NodeAnnotationConfigStatus], n.Annotations[v1alpha1.NodeAnnotationConfigStatus]
	if before == after {
		return false
	}
	return reportedError(before) != reportedError(after)
}

// reportedError is the error of a config-status annotation ("" when none or
// it does not decode).
func reportedError(annotation string) string {
	st, _ := v1alpha1.DecodeNodeConfigStatus(annotation)
	return st.Error
}
