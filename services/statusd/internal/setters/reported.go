package setters

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConditionsFunc returns the conditions one reporter wants on the Node and
// the types it owned before but no longer reports (to remove).
type ConditionsFunc func() (want []metav1.Condition, dropped []string)

// Reported applies an external component's latest Report.
func Reported(conditions ConditionsFunc) Setter {
	return func(_ context.Context, node *corev1.Node) error {
		want, dropped := conditions()
		for _, t := range dropped {
			RemoveCondition(node, t)
		}
		for _, c := range want {
			SetCondition(node, c)
		}
		return nil
	}
}
