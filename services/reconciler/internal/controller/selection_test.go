package controller

import (
	"slices"
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

// The nodes a NodeConfig selects are listed once and kept until a Node
// comes, goes or is relabelled; a new generation parses its selector anew.
func TestSelectedNodesAreKeptUntilTheNodesChange(t *testing.T) {
	f := newFixture(t)
	f.addNode("n1", map[string]string{"pool": "a"})
	f.addNode("n2", map[string]string{"pool": "b"})
	generation := func(g int64, sel *metav1.LabelSelector) *v1alpha1.NodeConfig {
		return &v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "pool", UID: "uid-pool", Generation: g},
			Spec: v1alpha1.NodeConfigSpec{NodeSelector: sel}}
	}
	nc := generation(1, &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}})
	if got := f.c.selectedNodes(nc); !slices.Equal(got, []string{"n1"}) {
		t.Fatalf("selected %v, want n1", got)
	}

	// In the Node cache, but no event said so yet: the kept list stands.
	if err := f.nodes.Add(nodeMeta(metav1.ObjectMeta{Name: "n3", Labels: map[string]string{"pool": "a"}})); err != nil {
		t.Fatal(err)
	}
	if got := f.c.selectedNodes(nc); !slices.Equal(got, []string{"n1"}) {
		t.Fatalf("selected %v before the nodes changed, want the kept n1", got)
	}
	f.c.nodesChanged()
	got := slices.Sorted(slices.Values(f.c.selectedNodes(nc)))
	if !slices.Equal(got, []string{"n1", "n3"}) {
		t.Fatalf("selected %v after the nodes changed, want n1 n3", got)
	}

	next := generation(2, &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "b"}})
	if got := f.c.selectedNodes(next); !slices.Equal(got, []string{"n2"}) {
		t.Fatalf("generation 2 selected %v, want n2 (its own selector)", got)
	}
	if !f.c.selects(nc, nodeMeta(metav1.ObjectMeta{Labels: map[string]string{"pool": "a"}})) {
		t.Error("generation 1's selector was lost when generation 2 was parsed")
	}

	invalid := generation(3, &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: "Near"}}})
	if f.c.selectorErr(invalid) == nil || len(f.c.selectedNodes(invalid)) != 0 {
		t.Errorf("an invalid selector: err %v, selected %v; want an error and no node", f.c.selectorErr(invalid), f.c.selectedNodes(invalid))
	}
	if f.c.selectorErr(nc) != nil {
		t.Errorf("generation 1's selector has error %v", f.c.selectorErr(nc))
	}
}
