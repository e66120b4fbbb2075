//go:build crdschema

package v1alpha1

// LabelSelector is labelSelector, the schema of spec.nodeSelector in the CRD,
// when controller-gen loads this package with the crdschema build tag (see
// selector.go). In every build of the code it is metav1.LabelSelector.
type LabelSelector = labelSelector
