package controller

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/policy"
)

// nodeRef is the Node an Event is recorded on. A cached Node is its
// metadata alone, so its reference is built here: the Event names the Node
// (v1, Kind Node), whatever type the cache holds. A NodeConfig's Events are
// recorded on the typed object itself, whose reference the recorder builds
// from its scheme (v1alpha1 is registered in it).
func nodeRef(node *metav1.PartialObjectMetadata) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID}
}

// emit counts promotions and rollbacks and records a node's events:
// warnings always, on the Node and its NodeConfig; Normal ones on the Node
// only with NormalNodeEvents, as its condition and annotation already show
// them.
func (c *Controller) emit(node *metav1.PartialObjectMetadata, nc *v1alpha1.NodeConfig, events []policy.Event) {
	for _, e := range events {
		typ := corev1.EventTypeNormal
		if e.Warning {
			typ = corev1.EventTypeWarning
		}
		switch e.Reason {
		case v1alpha1.EventConfigPromoted:
			c.metrics.promotions.Inc()
		case v1alpha1.EventConfigRolledBack:
			c.metrics.rollbacks.Inc()
		}
		if c.o.Recorder == nil || (!e.Warning && !c.o.NormalNodeEvents) {
			continue
		}
		c.o.Recorder.Event(nodeRef(node), typ, e.Reason, e.Message)
		// The NodeConfig gets what needs attention; its status counts the rest.
		if nc != nil && e.Warning {
			c.o.Recorder.Eventf(nc, typ, e.Reason, "node %s: %s", node.Name, e.Message)
		}
	}
}
