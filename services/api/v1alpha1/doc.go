// Package v1alpha1 holds the Go types of the NodeConfig API
// (nodeconfig.io/v1alpha1). The CRD in deploy/crd and the deep copies in
// zz_generated.deepcopy.go (so that an informer's cache can hold typed
// NodeConfigs) are generated from them and their markers by controller-gen
// ('make generate'; 'make lint' fails when either is stale).
//
// +groupName=nodeconfig.io
// +kubebuilder:object:generate=true
package v1alpha1
