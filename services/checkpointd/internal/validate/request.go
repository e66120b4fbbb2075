// Package validate holds checkpointd's pure checks of requests: sources,
// ConfigMap keys, sizes and error reasons.
package validate

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// MaxPayloadBytes is the ConfigMap size limit the API server enforces.
const MaxPayloadBytes = 1 << 20

// Version checks a uid/resourceVersion pair.
func Version(uid, resourceVersion string) error {
	var errs []error
	if uid == "" {
		errs = append(errs, errors.New("uid is empty: an empty UID is ambiguous, pass the ConfigMap's metadata.uid"))
	}
	if resourceVersion == "" {
		errs = append(errs, errors.New("resource_version is empty: pass the ConfigMap's metadata.resourceVersion"))
	}
	// Both become a bbolt key "uid/rv"; a slash in either would make it ambiguous.
	for name, v := range map[string]string{"uid": uid, "resource_version": resourceVersion} {
		if strings.ContainsAny(v, "/\x00") || len(v) > 253 {
			errs = append(errs, fmt.Errorf("%s %q: must be at most 253 characters without '/' or NUL", name, v))
		}
	}
	return errors.Join(errs...)
}

// Key checks a ConfigMap key: the API server's own rule, which refuses path
// separators, "." and "..", and names over 253 characters.
func Key(key string) error {
	if msgs := validation.IsConfigMapKey(key); len(msgs) > 0 {
		return fmt.Errorf("key %q is not a valid ConfigMap key: %s", key, strings.Join(msgs, "; "))
	}
	return nil
}

// Source checks a source that must name one key of one ConfigMap version.
func Source(src *nodeconfigv1.ConfigSource) error {
	if src == nil {
		return errors.New("source is required")
	}
	errs := []error{Version(src.GetUid(), src.GetResourceVersion())}
	if src.GetKey() == "" {
		errs = append(errs, errors.New("source.key is empty: name the ConfigMap key that holds the config file"))
	} else {
		errs = append(errs, Key(src.GetKey()))
	}
	for field, v := range map[string]string{"namespace": src.GetNamespace(), "name": src.GetName()} {
		if v == "" {
			errs = append(errs, fmt.Errorf("source.%s is empty", field))
		} else if msgs := validation.IsDNS1123Subdomain(v); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("source.%s %q: %s", field, v, strings.Join(msgs, "; ")))
		}
	}
	return errors.Join(errs...)
}

// Data checks a ConfigMap's data: valid keys, at most 1 MiB in all, and the
// key the source names present.
func Data(data map[string]string, key string) error {
	if len(data) == 0 {
		return errors.New("data is empty: a checkpoint holds at least the key the node consumes")
	}
	var total int
	var errs []error
	for k, v := range data {
		total += len(k) + len(v)
		if err := Key(k); err != nil {
			errs = append(errs, err)
		}
	}
	if total > MaxPayloadBytes {
		errs = append(errs, fmt.Errorf("data is %d bytes, over the 1 MiB ConfigMap limit", total))
	}
	if key != "" {
		if _, ok := data[key]; !ok {
			errs = append(errs, fmt.Errorf("data has no key %q, which the source names", key))
		}
	}
	return errors.Join(errs...)
}

// Reason checks a CamelCase reason, the metav1.Condition rule.
func Reason(reason string) error {
	if !reasonPattern.MatchString(reason) || len(reason) > 1024 {
		return fmt.Errorf("reason %q must be CamelCase (like DownloadFailed), at most 1024 characters", reason)
	}
	return nil
}

var reasonPattern = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)
