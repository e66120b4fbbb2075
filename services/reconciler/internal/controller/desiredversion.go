package controller

import (
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/rollout"
)

// currentSource is the version nc assigns now (before any undo), from the
// cached ConfigMap (or the revision it pins) as the nodes' syncs read it
// (resolve); nil when it has no source or the ConfigMap, key or revision
// is missing.
func (c *Controller) currentSource(nc *v1alpha1.NodeConfig) *nodeconfigv1.ConfigSource {
	if nc.Spec.Source == nil || nc.Spec.Source.ConfigMap == nil {
		return nil
	}
	src, _, err := c.resolve(nc)
	if err != nil {
		return nil
	}
	return src
}

// versionOf is src as judged under nc's validator; ok is false for none.
func versionOf(nc *v1alpha1.NodeConfig, src *nodeconfigv1.ConfigSource) (rollout.Version, bool) {
	if src == nil {
		return rollout.Version{}, false
	}
	return rollout.VersionOf(src, validators[nc.Spec.Validator]), true
}
