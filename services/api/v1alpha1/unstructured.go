package v1alpha1

import "k8s.io/apimachinery/pkg/runtime"

// The services read and write NodeConfigs through the typed client
// (nodeconfig.io/services/api/client); these convert for the tests and
// tools that use the dynamic client, to write specs the Go types cannot
// (the CRD's validation of them), or to stay free of the typed client.

// FromUnstructured converts an object from the dynamic client.
func FromUnstructured(obj map[string]any) (*NodeConfig, error) {
	nc := &NodeConfig{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, nc); err != nil {
		return nil, err
	}
	return nc, nil
}

// ToUnstructured converts for the dynamic client.
func ToUnstructured(nc *NodeConfig) (map[string]any, error) {
	return runtime.DefaultUnstructuredConverter.ToUnstructured(nc)
}
