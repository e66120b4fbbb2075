// Package v1alpha1 holds the Go types of the NodeConfig API
// (nodeconfig.io/v1alpha1). The CRD in deploy/crd is generated from them
// and their markers by controller-gen ('make generate'; 'make lint' fails
// when it is stale).
//
// +groupName=nodeconfig.io
// +kubebuilder:object:generate=false
package v1alpha1
