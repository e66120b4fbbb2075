package v1alpha1

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
)

// The codec of a Node's config-status annotation (NodeAnnotationConfigStatus):
// the node's NodeConfigStatus as JSON, in the shape of core/v1
// NodeConfigStatus. statusd writes it; the reconciler, the plugin and the
// tests read it through DecodeNodeConfigStatus.

// EncodeNodeConfigStatus is the annotation's value for st.
func EncodeNodeConfigStatus(st corev1.NodeConfigStatus) (string, error) {
	buf, err := json.Marshal(st)
	if err != nil {
		return "", err
	}
	return string(buf), nil
}

// DecodeNodeConfigStatus reads an annotation's value. On an error, st holds
// what did read (encoding/json's: a field of the wrong type is skipped, the
// others read; a value that is not JSON reads nothing).
func DecodeNodeConfigStatus(value string) (st corev1.NodeConfigStatus, err error) {
	err = json.Unmarshal([]byte(value), &st)
	return st, err
}

// NodeConfigStatusOf reads the config-status annotation among a Node's
// annotations; ok is false when the node has none (it has not reported
// yet).
func NodeConfigStatusOf(annotations map[string]string) (st corev1.NodeConfigStatus, ok bool, err error) {
	value, ok := annotations[NodeAnnotationConfigStatus]
	if !ok {
		return st, false, nil
	}
	st, err = DecodeNodeConfigStatus(value)
	return st, true, err
}
