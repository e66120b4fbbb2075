package controller

import (
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/rollout"
)

// desiredVersion is the version nc assigns now, from the cached ConfigMap
// (or the revision it pins) as the nodes' syncs read it (resolve); ok is
// false when it has no source or the ConfigMap, key or revision is
// missing.
func (c *Controller) desiredVersion(nc *v1alpha1.NodeConfig) (rollout.Version, bool) {
	if nc.Spec.Source == nil || nc.Spec.Source.ConfigMap == nil {
		return rollout.Version{}, false
	}
	src, _, err := c.resolve(nc)
	if err != nil {
		return rollout.Version{}, false
	}
	return rollout.VersionOf(src, validators[nc.Spec.Validator]), true
}
