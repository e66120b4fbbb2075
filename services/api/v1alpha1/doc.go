// Package v1alpha1 holds the Go types of the NodeConfig API
// (nodeconfig.io/v1alpha1), their scheme registration (register.go), and
// the names every component reads and writes on NodeConfigs and Nodes: the
// condition types and reasons, the Event reasons and the annotations
// (names.go), with the codec of the Node's config-status annotation
// (nodestatus.go).
//
// Generated from the types and their markers ('make generate'; 'make lint'
// fails when any is stale): the CRD in deploy/crd and the deep copies in
// zz_generated.deepcopy.go, by controller-gen; the typed clientset (with its
// fake), listers and informers in nodeconfig.io/services/api/client, by
// client-gen, lister-gen and informer-gen (hack/gen-client.sh).
//
// +groupName=nodeconfig.io
// +groupGoName=NodeConfig
// +kubebuilder:object:generate=true
package v1alpha1
