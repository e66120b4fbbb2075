package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of NodeConfig (the +groupName of doc.go).
const GroupName = "nodeconfig.io"

// SchemeGroupVersion is the group and version the types are registered
// under.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// GroupVersionResource of NodeConfig.
var GroupVersionResource = SchemeGroupVersion.WithResource("nodeconfigs")

// Kind is the group-qualified kind of an unqualified one.
func Kind(kind string) schema.GroupKind {
	return SchemeGroupVersion.WithKind(kind).GroupKind()
}

// Resource is the group-qualified resource of an unqualified one.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

var (
	// SchemeBuilder registers the types of this package.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types of this package to a scheme: the
	// generated clientset's, and client-go's (k8s.io/client-go/kubernetes/scheme)
	// wherever Events are recorded on NodeConfigs.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &NodeConfig{}, &NodeConfigList{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
