// Package configcheck holds the validators a NodeConfig names (yaml, json,
// kubelet, none): the reconciler runs them on a new version before it
// assigns it to any node, and each node runs them again on activation,
// where it can also see its own files.
//
// This package is light: the kubelet validator, which links the kubelet's
// code (k8s.io/kubernetes), is plugged in by the caller. The nodes run it
// in process (kubeletcheck); the reconciler runs it in a child process
// (kubeletexec), so that its own binary does not carry the kubelet's code.
package configcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"sigs.k8s.io/yaml"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// Reasons a payload fails to load or validate (late errors).
const (
	ReasonValidationFailed = "ValidationFailed"
	ReasonLoadFailed       = "LoadFailed"
)

// Checker runs the validators. Its zero value runs every validator but the
// kubelet's, which it reports as unable to run.
type Checker struct {
	// Kubelet judges a KubeletConfiguration drop-in: nil when valid, the
	// kubelet's words when not, or an *UnavailableError when it could not
	// judge at all.
	Kubelet func(ctx context.Context, data []byte) error
}

// UnavailableError says a validator could not run (its binary is missing,
// crashed or did not answer in time): the payload has no verdict, and is
// neither valid nor invalid until a later run judges it.
type UnavailableError struct {
	// Validator is the validator's name, as a NodeConfig spells it.
	Validator string
	Err       error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("the %s validator could not run: %v", e.Validator, e.Err)
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// Unavailable says whether err is a validator's failure to run rather
// than a verdict.
func Unavailable(err error) bool {
	var u *UnavailableError
	return errors.As(err, &u)
}

// Payload checks one config file with the chosen validator. The error names
// the field, and the line where the decoder gives one; an *UnavailableError
// is no verdict (see Unavailable).
func (c Checker) Payload(ctx context.Context, v nodeconfigv1.Validator, data []byte) error {
	switch v {
	case nodeconfigv1.Validator_VALIDATOR_NONE:
		return nil
	case nodeconfigv1.Validator_VALIDATOR_UNSPECIFIED, nodeconfigv1.Validator_VALIDATOR_YAML:
		return yamlDocument(data)
	case nodeconfigv1.Validator_VALIDATOR_JSON:
		return jsonDocument(data)
	case nodeconfigv1.Validator_VALIDATOR_KUBELET:
		return c.kubeletConfiguration(ctx, data)
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
func (c Checker) kubeletConfiguration(ctx context.Context, data []byte) error {
	if c.Kubelet == nil {
		return &UnavailableError{Validator: "kubelet", Err: errors.New("this process has no kubelet validator")}
	}
	err := c.Kubelet(ctx, data)
	if err == nil || Unavailable(err) {
		return err
	}
	return fmt.Errorf("invalid KubeletConfiguration: %w", err)
}
