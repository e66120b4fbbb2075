package rollout

import (
	"strings"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
)

// Version is what decides whether a config loads on a node: a halt, a
// central verdict and a node's rollback are each about one Version.
type Version struct{ UID, ResourceVersion, Key, Validator string }

// VersionOf is the Version of src judged by v.
func VersionOf(src *nodeconfigv1.ConfigSource, v nodeconfigv1.Validator) Version {
	return Version{src.GetUid(), src.GetResourceVersion(), src.GetKey(), validatorName(v)}
}

// AssignedVersion is the version a node's records assign; ok is false when
// nothing is assigned.
func AssignedVersion(recs *nodeconfigv1.Records) (Version, bool) {
	a := recs.GetAssigned()
	if a.GetSource() == nil {
		return Version{}, false
	}
	return VersionOf(a.GetSource(), a.GetValidator()), true
}

func (v Version) is(rb v1alpha1.RolledBackVersion) bool {
	return v == Version{rb.UID, rb.ResourceVersion, rb.Key, rb.Validator}
}

func validatorName(v nodeconfigv1.Validator) string {
	if v == nodeconfigv1.Validator_VALIDATOR_UNSPECIFIED {
		v = nodeconfigv1.Validator_VALIDATOR_YAML
	}
	return strings.ToLower(strings.TrimPrefix(v.String(), "VALIDATOR_"))
}
