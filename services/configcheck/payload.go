// Package configcheck holds the validators a NodeConfig names (yaml, json,
// kubelet, none): the reconciler runs them on a new version before it
// assigns it to any node, and each node runs them again on activation,
// where it can also see its own files.
package configcheck

import (
	"context"
	"encoding/json"
	"fmt"

	"sigs.k8s.io/yaml"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/configcheck/kubeletcheck"
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

// kubeletConfiguration judges a drop-in as the kubelet would over its
// defaults; the node judges it again merged with its own files.
func kubeletConfiguration(data []byte) error {
	if err := kubeletcheck.Check(context.Background(), data); err != nil {
		return fmt.Errorf("invalid KubeletConfiguration: %w", err)
	}
	return nil
}
