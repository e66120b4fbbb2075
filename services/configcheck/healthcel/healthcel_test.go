package healthcel

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestAGateHoldsOrNotOverTheNode(t *testing.T) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"zone": "a"}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	for expr, want := range map[string]bool{
		`node.status.conditions.exists(c, c.type == "Ready" && c.status == "True")`: true,
		`node.status.allocatable.pods == "110"`:                                     true,
		`node.metadata.labels.zone == "b"`:                                          false,
	} {
		p, err := Compile(expr)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		if got, err := p.Holds(node); err != nil || got != want {
			t.Errorf("%s = %v (%v); want %v", expr, got, err, want)
		}
	}
	p, err := Compile(`node.spec.providerID == "x"`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Holds(node); err == nil {
		t.Error("a field the Node lacks evaluated without an error")
	}
}

func TestAnExpressionThatIsNoGateIsRefused(t *testing.T) {
	for expr, says := range map[string]string{
		`node.status.conditions.exists(c,`: "does not compile",
		`1 + 2`:                            "a gate is a bool",
		`nodes.size() > 0`:                 "undeclared reference",
	} {
		if _, err := Compile(expr); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: %v; want an error saying %q", expr, err, says)
		}
	}
}
