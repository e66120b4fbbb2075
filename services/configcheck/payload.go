// Package configcheck holds the validators a NodeConfig names (yaml, json,
// kubelet, none): the reconciler runs them on a new version before it
// assigns it to any node, and each node runs them again on activation,
// where it can also see its own files.
package configcheck

import (
	"encoding/json"
	"fmt"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// Reasons a payload fails to load or validate (late errors).
const (
	ReasonValidationFailed = "ValidationFailed"
	ReasonLoadFailed       = "LoadFailed"
)

// Payload checks one config file with the chosen validator. The error names
// the field, and the line where the decoder gives one.
func Payload(v nodeconfigv1.Validator, data []byte) error {
	switch v {
	case nodeconfigv1.Validator_VALIDATOR_NONE:
		return nil
	case nodeconfigv1.Validator_VALIDATOR_UNSPECIFIED, nodeconfigv1.Validator_VALIDATOR_YAML:
		return yamlDocument(data)
	case nodeconfigv1.Validator_VALIDATOR_JSON:
		return jsonDocument(data)
	case nodeconfigv1.Validator_VALIDATOR_KUBELET:
		return kubeletConfiguration(data)
	default:
		return fmt.Errorf("unknown validator %v", v)
	}
}

func yamlDocument(data []byte) error {
	// Strict conversion also refuses duplicate keys, which a plain parse
	// would resolve silently to the last one.
	if _, err := yaml.YAMLToJSONStrict(data); err != nil {
		return fmt.Errorf("invalid YAML: %w", err)
	}
	return nil
}

func jsonDocument(data []byte) error {
	if !json.Valid(data) {
		var v any
		err := json.Unmarshal(data, &v)
		return fmt.Errorf("invalid JSON: %w", err)
	}
	// JSON is YAML: the strict YAML pass finds duplicate keys.
	if _, err := yaml.YAMLToJSONStrict(data); err != nil {
		return fmt.Errorf("invalid JSON: %w", err)
	}
	return nil
}

const (
	kubeletAPIVersion = "kubelet.config.k8s.io/v1beta1"
	kubeletKind       = "KubeletConfiguration"
)

func kubeletConfiguration(data []byte) error {
	var cfg kubeletv1beta1.KubeletConfiguration
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		return fmt.Errorf("invalid KubeletConfiguration: %w", err)
	}
	if cfg.APIVersion != kubeletAPIVersion || cfg.Kind != kubeletKind {
		return fmt.Errorf("invalid KubeletConfiguration: apiVersion/kind is %q/%q, want %q/%q", cfg.APIVersion, cfg.Kind, kubeletAPIVersion, kubeletKind)
	}
	return kubeletRanges(&cfg)
}

// kubeletRanges checks the fields whose bad values are obvious without the
// kubelet's own validation (which lives in k8s.io/kubernetes, not a library).
func kubeletRanges(c *kubeletv1beta1.KubeletConfiguration) error {
	inRange := func(field string, v, lo, hi int64) error {
		if v < lo || v > hi {
			return fmt.Errorf("invalid KubeletConfiguration: %s is %d, must be between %d and %d", field, v, lo, hi)
		}
		return nil
	}
	checks := []error{
		inRange("maxPods", int64(c.MaxPods), 0, 1<<20),
		inRange("podsPerCore", int64(c.PodsPerCore), 0, 1<<20),
		inRange("port", int64(c.Port), 0, 65535),
		inRange("healthzPort", int64(deref(c.HealthzPort)), 0, 65535),
		inRange("imageGCHighThresholdPercent", int64(deref(c.ImageGCHighThresholdPercent)), 0, 100),
		inRange("imageGCLowThresholdPercent", int64(deref(c.ImageGCLowThresholdPercent)), 0, 100),
		inRange("kubeAPIBurst", int64(c.KubeAPIBurst), 0, 1<<20),
		inRange("kubeAPIQPS", int64(deref(c.KubeAPIQPS)), 0, 1<<20),
	}
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	if c.ImageGCHighThresholdPercent != nil && c.ImageGCLowThresholdPercent != nil &&
		*c.ImageGCLowThresholdPercent > *c.ImageGCHighThresholdPercent {
		return fmt.Errorf("invalid KubeletConfiguration: imageGCLowThresholdPercent (%d) must not exceed imageGCHighThresholdPercent (%d)",
			*c.ImageGCLowThresholdPercent, *c.ImageGCHighThresholdPercent)
	}
	for field, d := range map[string]int64{
		"syncFrequency":             int64(c.SyncFrequency.Duration),
		"nodeStatusUpdateFrequency": int64(c.NodeStatusUpdateFrequency.Duration),
		"fileCheckFrequency":        int64(c.FileCheckFrequency.Duration),
	} {
		if d < 0 {
			return fmt.Errorf("invalid KubeletConfiguration: %s must not be negative", field)
		}
	}
	return nil
}

func deref[T int32 | float32](p *T) T {
	if p == nil {
		return 0
	}
	return *p
}
