package v1alpha1

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
)

// The scheme names NodeConfig and its list by the group and version of the
// CRD (what event references and the typed client's codec read).
func TestSchemeRegistersTheTypes(t *testing.T) {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	for obj, kind := range map[runtime.Object]string{&NodeConfig{}: "NodeConfig", &NodeConfigList{}: "NodeConfigList"} {
		gvks, _, err := s.ObjectKinds(obj)
		if err != nil || len(gvks) != 1 || gvks[0] != SchemeGroupVersion.WithKind(kind) {
			t.Errorf("%T is %v, %v; want %v", obj, gvks, err, SchemeGroupVersion.WithKind(kind))
		}
	}
	if GroupVersionResource.String() != "nodeconfig.io/v1alpha1, Resource=nodeconfigs" || Resource("nodeconfigs") != GroupVersionResource.GroupResource() ||
		Kind("NodeConfig").String() != "NodeConfig.nodeconfig.io" {
		t.Errorf("GroupVersionResource %v, Resource %v, Kind %v", GroupVersionResource, Resource("nodeconfigs"), Kind("NodeConfig"))
	}
}
