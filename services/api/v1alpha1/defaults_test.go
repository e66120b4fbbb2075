package v1alpha1

import (
	"os"
	"testing"

	"sigs.k8s.io/yaml"
)

// The CRD's default for spec.soakSeconds (a marker, which cannot name a Go
// constant) is DefaultSoakSeconds, the reconciler's default.
func TestCRDDefaultSoakIsDefaultSoakSeconds(t *testing.T) {
	raw, err := os.ReadFile("../../../deploy/crd/nodeconfig.io_nodeconfigs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema struct {
						Properties map[string]struct {
							Properties map[string]struct {
								Default    any `json:"default"`
								Properties map[string]struct {
									Properties map[string]struct {
										Default any `json:"default"`
									} `json:"properties"`
								} `json:"properties"`
							} `json:"properties"`
						} `json:"properties"`
					} `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) != 1 {
		t.Fatalf("%d versions in the CRD, want 1", len(crd.Spec.Versions))
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	got := spec.Properties["soakSeconds"].Default
	if f, ok := got.(float64); !ok || f != DefaultSoakSeconds {
		t.Fatalf("the CRD's default soakSeconds is %v, DefaultSoakSeconds is %d: change the +kubebuilder:default marker and run make generate", got, DefaultSoakSeconds)
	}
	// And spec.rollout.drain.timeoutSeconds's is DefaultDrainTimeoutSeconds,
	// the agent's bound of a drain whose NodeConfig sets no drain.
	got = spec.Properties["rollout"].Properties["drain"].Properties["timeoutSeconds"].Default
	if f, ok := got.(float64); !ok || f != DefaultDrainTimeoutSeconds {
		t.Fatalf("the CRD's default drain.timeoutSeconds is %v, DefaultDrainTimeoutSeconds is %d: change the +kubebuilder:default marker and run make generate", got, DefaultDrainTimeoutSeconds)
	}
}
