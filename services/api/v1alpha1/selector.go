package v1alpha1

// spec.nodeSelector is a metav1.LabelSelector in Go (LabelSelector is an
// alias of it), but its schema in the CRD is generated from labelSelector
// below, which has the same JSON fields plus the rules metav1.LabelSelector
// enforces when it is parsed (label key and value syntax, operators, values
// present for In and NotIn only). So the API server refuses a selector the
// reconciler could not parse: one that does not parse selects nothing, which
// would reset every node. controller-gen sees labelSelector because it loads
// this package with the crdschema build tag (see selector_crdschema.go and
// hack/gen-crd.sh). The tests of selector_test.go keep the two in step: the
// same JSON, and the markers refuse the keys, values and operators that
// metav1.LabelSelectorAsSelector refuses.

// labelSelector is the schema of metav1.LabelSelector in the CRD.
//
// +structType=atomic
type labelSelector struct {
	// Labels the node must have, each with exactly this value. Every pair
	// must match, and every requirement of matchExpressions.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule=`self.all(k, size(k) <= 317 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))`,message="matchLabels keys must be label keys: an optional DNS subdomain prefix and '/', then at most 63 characters of [A-Za-z0-9-_.], starting and ending alphanumeric"
	// +optional
	MatchLabels map[string]labelValue `json:"matchLabels,omitempty"`
	// Requirements on the node's labels; every one must hold, and every pair
	// of matchLabels.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	MatchExpressions []labelSelectorRequirement `json:"matchExpressions,omitempty"`
}

// A requirement on one label: its key, an operator and, for In and NotIn,
// the values.
//
// +kubebuilder:validation:XValidation:rule="self.operator in ['In', 'NotIn'] ? has(self.values) && size(self.values) > 0 : !has(self.values) || size(self.values) == 0",message="values must be non-empty for the operators In and NotIn, and empty for Exists and DoesNotExist"
type labelSelectorRequirement struct {
	// A label key.
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`
	Key string `json:"key"`
	// In and NotIn: the label's value is (not) one of values (NotIn also
	// matches a node without the label). Exists and DoesNotExist: the node
	// has (has not) the label, whatever its value.
	// +kubebuilder:validation:Enum=In;NotIn;Exists;DoesNotExist
	Operator string `json:"operator"`
	// The values of In and NotIn; empty for Exists and DoesNotExist.
	// +kubebuilder:validation:MaxItems=256
	// +listType=atomic
	// +optional
	Values []labelValue `json:"values,omitempty"`
}

// A label value.
//
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`
type labelValue string
