package controller

import (
	"slices"
	"strings"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/pacing"
)

// A halt is kept per config version in the NodeConfig's status: the nodes
// that rolled back from a version stay counted after they are deleted or
// their agent goes away, and a new leader reads them back from the API.

const (
	// keptVersions bounds the versions a status remembers (newest last).
	keptVersions = 8
	// keptNodes bounds the node names kept per version, unless the
	// NodeConfig's maxFailures is higher: the names are what a new leader
	// counts a halt by (the status counts come from the nodes' states), so
	// maxFailures of them hold a halt after the nodes are gone, and more
	// would only lengthen a message.
	keptNodes = 256
)

// version is what decides whether a config loads on a node.
type version struct{ uid, resourceVersion, key, validator string }

func versionOf(src *nodeconfigv1.ConfigSource, v nodeconfigv1.Validator) version {
	return version{src.GetUid(), src.GetResourceVersion(), src.GetKey(), validatorName(v)}
}

// assignedVersion is the version a node's records assign; ok is false when
// nothing is assigned.
func assignedVersion(recs *nodeconfigv1.Records) (version, bool) {
	a := recs.GetAssigned()
	if a.GetSource() == nil {
		return version{}, false
	}
	return versionOf(a.GetSource(), a.GetValidator()), true
}

func (v version) is(rb v1alpha1.RolledBackVersion) bool {
	return v == version{rb.UID, rb.ResourceVersion, rb.Key, rb.Validator}
}

func validatorName(v nodeconfigv1.Validator) string {
	if v == nodeconfigv1.Validator_VALIDATOR_UNSPECIFIED {
		v = nodeconfigv1.Validator_VALIDATOR_YAML
	}
	return strings.ToLower(strings.TrimPrefix(v.String(), "VALIDATOR_"))
}

// rolledBackLocked names the nodes known to have rolled back from v: those
// the status keeps and those rolled back now that it may not keep yet.
// c.mu must be held.
func (c *Controller) rolledBackLocked(nc *v1alpha1.NodeConfig, v version, selected []string) map[string]bool {
	out := map[string]bool{}
	for _, rb := range nc.Status.RolledBackVersions {
		if v.is(rb) {
			for _, n := range rb.Nodes {
				out[n] = true
			}
		}
	}
	for _, name := range selected {
		n := c.nodes[name]
		if n == nil || n.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ROLLED_BACK {
			continue
		}
		if got, ok := assignedVersion(n.Records); ok && got == v {
			out[name] = true
		}
	}
	return out
}

// rolledBackVersionsLocked is the status's list: the kept one plus every
// selected node now rolled back, newest versions last. c.mu must be held.
func (c *Controller) rolledBackVersionsLocked(nc *v1alpha1.NodeConfig, selected []string) []v1alpha1.RolledBackVersion {
	kept := max(keptNodes, pacing.MaxFailures(nc.Spec.Rollout.MaxFailures))
	var out []v1alpha1.RolledBackVersion
	for _, rb := range nc.Status.RolledBackVersions {
		rb.Nodes = slices.Clone(rb.Nodes)
		out = append(out, rb)
	}
	for _, name := range selected {
		n := c.nodes[name]
		if n == nil || n.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ROLLED_BACK {
			continue
		}
		v, ok := assignedVersion(n.Records)
		if !ok {
			continue
		}
		i := slices.IndexFunc(out, v.is)
		if i < 0 {
			out = append(out, v1alpha1.RolledBackVersion{UID: v.uid, ResourceVersion: v.resourceVersion, Key: v.key, Validator: v.validator})
			i = len(out) - 1
		}
		if !slices.Contains(out[i].Nodes, name) && len(out[i].Nodes) < kept {
			out[i].Nodes = append(out[i].Nodes, name)
			slices.Sort(out[i].Nodes)
		}
	}
	if len(out) > keptVersions {
		out = out[len(out)-keptVersions:]
	}
	return out
}

// desiredVersion is the version nc assigns now, from the cached ConfigMap
// as the nodes' syncs read it (pinned); ok is false when it has no source
// or the ConfigMap or key is missing.
func (c *Controller) desiredVersion(nc *v1alpha1.NodeConfig) (version, bool) {
	if nc.Spec.Source == nil || nc.Spec.Source.ConfigMap == nil {
		return version{}, false
	}
	src, _, err := c.pinned(nc.Spec.Source.ConfigMap)
	if err != nil {
		return version{}, false
	}
	return versionOf(src, validators[nc.Spec.Validator]), true
}
