package controller

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeconfig.io/services/api/v1alpha1"
)

func TestReconcileIntervalAnnotation(t *testing.T) {
	nc := func(v string, set bool) *v1alpha1.NodeConfig {
		n := &v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
		if set {
			n.Annotations[v1alpha1.AnnotationReconcileInterval] = v
		}
		return n
	}
	for _, tc := range []struct {
		v    string
		set  bool
		want time.Duration
	}{
		{"", false, DefaultReconcileInterval},
		{"0", true, 0},
		{"30", true, 30 * time.Second},
		{"-5", true, DefaultReconcileInterval},
		{"soon", true, DefaultReconcileInterval},
	} {
		if got := reconcileInterval(nc(tc.v, tc.set)); got != tc.want {
			t.Errorf("interval %q = %v, want %v", tc.v, got, tc.want)
		}
	}
	if reconcileInterval(nil) != DefaultReconcileInterval {
		t.Error("no NodeConfig: want the default interval")
	}
}

// A reconcile interval that is not a whole number of seconds >= 0 is
// reported on the NodeConfig — Degraded with the value and the default used
// instead — and by one Warning event, instead of silently becoming 600 s.
func TestInvalidReconcileIntervalIsReported(t *testing.T) {
	for _, v := range []string{"-5", "soon", "1.5"} {
		t.Run(v, func(t *testing.T) {
			f := newFixture(t)
			f.addNode("n1", map[string]string{"pool": "a"})
			f.addConfigMap("ns", "cfg", "10", map[string]string{"k": "maxPods: 1\n"})
			f.setNodeConfig(&v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{
				Name: "pool-a", Finalizers: []string{v1alpha1.Finalizer},
				Annotations: map[string]string{v1alpha1.AnnotationReconcileInterval: v},
			}, Spec: v1alpha1.NodeConfigSpec{
				NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}},
				Source:       &v1alpha1.Source{ConfigMap: &v1alpha1.ConfigMapSource{Namespace: "ns", Name: "cfg", Key: "k"}},
				SoakSeconds:  60,
			}})
			if err := f.syncNode("n1"); err != nil {
				t.Fatal(err)
			}
			f.syncNodeConfig("pool-a")
			c := meta.FindStatusCondition(f.storedNodeConfig("pool-a").Status.Conditions, v1alpha1.ConditionDegraded)
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonInvalidReconcileInterval || !strings.Contains(c.Message, strconv.Quote(v)) || !strings.Contains(c.Message, "600") {
				t.Fatalf("Degraded %+v, want True/%s naming %q and the 600 s used instead", c, v1alpha1.ReasonInvalidReconcileInterval, v)
			}
			var warnings []string
			for _, e := range f.events() {
				if strings.HasPrefix(e, "Warning "+v1alpha1.ReasonInvalidReconcileInterval) {
					warnings = append(warnings, e)
				}
			}
			if len(warnings) != 1 {
				t.Fatalf("events %q, want one Warning %s", warnings, v1alpha1.ReasonInvalidReconcileInterval)
			}
		})
	}
}
