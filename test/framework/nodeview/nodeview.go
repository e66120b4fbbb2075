// Package nodeview reads what a Node says about its config, as a user sees
// it: the config-status annotation and the NodeConfigReady condition.
package nodeview

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"nodeconfig.io/services/api/v1alpha1"
)

// Read returns the node's NodeConfigStatus annotation and its NodeConfigReady
// condition; an error while either is missing.
func Read(ctx context.Context, client kubernetes.Interface, node string) (corev1.NodeConfigStatus, *corev1.NodeCondition, error) {
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return corev1.NodeConfigStatus{}, nil, err
	}
	st, ok, err := v1alpha1.NodeConfigStatusOf(n.Annotations)
	if !ok {
		return st, nil, fmt.Errorf("node %s has no config-status annotation yet", node)
	}
	if err != nil {
		return st, nil, err
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == v1alpha1.NodeConditionConfigReady {
			return st, &n.Status.Conditions[i], nil
		}
	}
	return st, nil, fmt.Errorf("node %s has no %s condition yet", node, v1alpha1.NodeConditionConfigReady)
}

// ResourceVersion is the ConfigMap version a source pins, "" for none.
func ResourceVersion(src *corev1.NodeConfigSource) string {
	if src == nil || src.ConfigMap == nil {
		return ""
	}
	return src.ConfigMap.ResourceVersion
}
