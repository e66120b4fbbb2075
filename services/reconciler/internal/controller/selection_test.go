package controller

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeconfig.io/services/api/v1alpha1"
)

// A NodeConfig whose selector does not parse (one stored before the CRD
// refused it) changes no node — it may be the one a node belongs to — and
// says why on itself, with one Warning event.
func TestInvalidSelectorLeavesNodesAndIsReported(t *testing.T) {
	f := newFixture(t)
	agent := f.addNode("n1", map[string]string{"pool": "a"})
	f.addConfigMap("ns", "cfg", "10", map[string]string{"k": "maxPods: 1\n"})
	nc := &v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "pool-a"}, Spec: v1alpha1.NodeConfigSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}},
		Source:       &v1alpha1.Source{ConfigMap: &v1alpha1.ConfigMapSource{Namespace: "ns", Name: "cfg", Key: "k"}},
		SoakSeconds:  60,
	}}
	f.setNodeConfig(nc)
	if err := f.syncNode("n1"); err != nil {
		t.Fatal(err)
	}
	if agent.records().GetActive() == nil {
		t.Fatalf("setup: the config was not activated: %v", agent.records())
	}
	before := agent.records()
	wrote := len(agent.writes())

	nc.Generation = 2
	nc.Finalizers = []string{v1alpha1.Finalizer}
	nc.Spec.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: metav1.LabelSelectorOpIn}}}
	f.setNodeConfig(nc)
	if err := f.syncNode("n1"); err != nil {
		t.Fatal(err)
	}
	if w := agent.writes()[wrote:]; len(w) != 0 {
		t.Fatalf("an invalid selector changed the node: calls %v; records before %v after %v", w, before, agent.records())
	}
	f.syncNodeConfig("pool-a")
	got := f.storedNodeConfig("pool-a")
	for _, typ := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionDegraded} {
		c := meta.FindStatusCondition(got.Status.Conditions, typ)
		if c == nil || c.Reason != v1alpha1.ReasonInvalidSelector || !strings.Contains(c.Message, "values") {
			t.Fatalf("%s condition %+v, want reason %s naming the parse error", typ, c, v1alpha1.ReasonInvalidSelector)
		}
	}
	if meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionReady) {
		t.Fatal("Ready is True with an invalid selector")
	}
	evs := f.events()
	if len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning InvalidSelector") {
		t.Fatalf("events %q, want one Warning InvalidSelector", evs)
	}
}
