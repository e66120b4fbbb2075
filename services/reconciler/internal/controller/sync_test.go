package controller

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeconfig.io/services/api/v1alpha1"
)

// A missing ConfigMap is an early error: one Warning UpdateFailed per node
// per distinct error, not per retry, and the retries read the informer's
// cache only — its add event wakes the nodes — never the API server.
func TestMissingConfigMapWarnsOnceAndRetriesFromTheCache(t *testing.T) {
	f := newFixture(t)
	f.addNode("n1", map[string]string{"pool": "a"})
	f.setNodeConfig(&v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "pool-a"}, Spec: v1alpha1.NodeConfigSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}},
		Source:       &v1alpha1.Source{ConfigMap: &v1alpha1.ConfigMapSource{Namespace: "ns", Name: "gone", Key: "k"}},
	}})
	for range 4 {
		if err := f.syncNode("n1"); err == nil {
			t.Fatal("a sync without the ConfigMap succeeded")
		}
	}
	var warnings []string
	for _, e := range f.events() {
		if strings.HasPrefix(e, "Warning UpdateFailed") {
			warnings = append(warnings, e)
		}
	}
	// One on the Node and its copy on the NodeConfig.
	if len(warnings) != 2 || !strings.Contains(warnings[0], "ns/gone") {
		t.Fatalf("UpdateFailed events %q, want one for the node (and its copy on the NodeConfig) naming the ConfigMap", warnings)
	}
	for _, a := range f.kube.Actions() {
		if a.GetResource().Resource == "configmaps" {
			t.Fatalf("a retry asked the API server: %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
}
