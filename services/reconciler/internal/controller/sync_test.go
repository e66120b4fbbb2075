package controller

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/policy"
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

// Which NodeConfig a node follows, and what is done with it, from the
// NodeConfigs that select it. Every reset is a paced departure.
func TestDesiredPicksTheNodeConfigTheNodeFollows(t *testing.T) {
	deleting := func(name string, abandon bool) *v1alpha1.NodeConfig {
		nc := &v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: name, DeletionTimestamp: &metav1.Time{}}}
		if abandon {
			nc.Annotations = map[string]string{v1alpha1.AnnotationDeletionPolicy: v1alpha1.DeletionPolicyAbandon}
		}
		return nc
	}
	noSource := &v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "no-source"}}
	for _, tc := range []struct {
		name      string
		m         matches
		abandoned bool
		wantNC    string
		wantMode  policy.Mode
		departs   bool
	}{
		{"conflict", matches{live: []*v1alpha1.NodeConfig{noSource, poolA("other", v1alpha1.Rollout{})}}, false, "", policy.ModeLeave, false},
		{"live without a source", matches{live: []*v1alpha1.NodeConfig{noSource}}, false, "no-source", policy.ModeReset, true},
		{"deleting", matches{deleting: []*v1alpha1.NodeConfig{deleting("a", false)}}, false, "a", policy.ModeReset, true},
		{"deleting, one abandons", matches{deleting: []*v1alpha1.NodeConfig{deleting("a", false), deleting("b", true)}}, false, "b", policy.ModeLeave, false},
		{"live wins over deleting", matches{live: []*v1alpha1.NodeConfig{noSource}, deleting: []*v1alpha1.NodeConfig{deleting("b", true)}}, false, "no-source", policy.ModeReset, true},
		{"invalid selector", matches{invalidSelector: true}, false, "", policy.ModeLeave, false},
		{"none, abandoned", matches{}, true, "", policy.ModeLeave, true},
		{"none", matches{}, false, "", policy.ModeReset, true},
	} {
		f := newFixture(t)
		node := nodeMeta(metav1.ObjectMeta{Name: "n1"})
		if tc.abandoned {
			node.Annotations = map[string]string{v1alpha1.AnnotationAbandoned: "gone"}
		}
		nc, d, err := f.c.desired(context.Background(), node, tc.m)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := ""
		if nc != nil {
			got = nc.Name
		}
		if got != tc.wantNC || d.Mode != tc.wantMode || (d.Depart != nil) != tc.departs {
			t.Errorf("%s: NodeConfig %q mode %v departs %v, want %q %v %v", tc.name, got, d.Mode, d.Depart != nil, tc.wantNC, tc.wantMode, tc.departs)
		}
		if tc.m.conflict() {
			queued := drain(f.c.ncQ)
			if len(queued) != 2 {
				t.Errorf("conflict: NodeConfigs %v queued to report it, want both", queued)
			}
		}
	}
}

// A NodeConfig just created (or now naming another ConfigMap) starts the
// watch of its ConfigMap: until it has listed, the cache's "not found" is
// no news. The node waits without a call to its agent, an error or an
// event, and the listing's event brings it back: an Add when the ConfigMap
// exists, a Delete of the bare name when it does not. The NodeConfig's
// status waits with it.
func TestNodeWaitsForItsConfigMapsFirstListing(t *testing.T) {
	for _, exists := range []bool{true, false} {
		f := newFixture(t)
		listed := false
		f.c.o.ConfigMapListed = func(ns, name string) bool { return listed && ns == "ns" && name == "cfg" }
		_, cmH, _, _ := f.c.Handlers()
		a := f.addNode("n1", map[string]string{"pool": "a"})
		f.setNodeConfig(poolA("pool-a", v1alpha1.Rollout{}))
		drain(f.c.nodeQ)

		if err := f.syncNode("n1"); !errors.Is(err, errWaits) {
			t.Fatalf("exists=%v: a sync before the listing ended with %v, want it to wait", exists, err)
		}
		if len(a.calls) != 0 || len(f.events()) != 0 {
			t.Fatalf("exists=%v: before the listing the agent got %q and the events are %q, want nothing", exists, a.calls, f.events())
		}
		// Nor does the NodeConfig's status read the absence as news.
		before := len(f.api.Actions())
		if recheck, err := f.c.syncNodeConfig(context.Background(), "pool-a"); err != nil || recheck <= 0 {
			t.Fatalf("exists=%v: the status before the listing: err %v, recheck in %v, want no error and a recheck", exists, err, recheck)
		}
		if acts := f.api.Actions()[before:]; len(acts) != 0 {
			t.Fatalf("exists=%v: before the listing the status sync asked the API %v, want nothing", exists, acts)
		}

		listed = true
		if exists {
			cmH.OnAdd(f.addConfigMap("ns", "cfg", "1", map[string]string{"k": "a: 1"}), false)
		} else {
			cmH.OnDelete(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg"}})
		}
		if got := drain(f.c.nodeQ); !slices.Equal(got, []string{"n1"}) {
			t.Fatalf("exists=%v: the listing's event queued %q, want n1", exists, got)
		}
		err := f.syncNode("n1")
		if exists && (err != nil || !slices.Contains(a.writes(), "PutCheckpoint")) {
			t.Fatalf("after the listing found it: err %v, agent writes %q, want the config checkpointed", err, a.writes())
		}
		if !exists && (err == nil || !strings.Contains(err.Error(), `"cfg" not found`)) {
			t.Fatalf("after the listing found none: err %v, want the ConfigMap not found", err)
		}
	}
}

// Should no event bring back a node that waited for its ConfigMap's
// listing, the recheck does; a node the event brought back is not synced
// again.
func TestListingRecheckQueuesOnlyTheNodesStillWaiting(t *testing.T) {
	f := newFixture(t)
	f.c.listing.recheck = 20 * time.Millisecond
	listed := false
	f.c.o.ConfigMapListed = func(string, string) bool { return listed }
	f.addNode("n1", map[string]string{"pool": "a"})
	f.addNode("n2", map[string]string{"pool": "a"})
	f.setNodeConfig(poolA("pool-a", v1alpha1.Rollout{}))
	f.addConfigMap("ns", "cfg", "1", map[string]string{"k": "a: 1"})
	drain(f.c.nodeQ)
	for _, n := range []string{"n1", "n2"} {
		if err := f.syncNode(n); !errors.Is(err, errWaits) {
			t.Fatalf("%s's sync before the listing ended with %v, want it to wait", n, err)
		}
	}
	listed = true
	if err := f.syncNode("n1"); err != nil { // brought back by the listing's Add
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.c.nodeQ.Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	// Past every node's recheck, whatever it queued is queued.
	time.Sleep(10 * f.c.listing.recheck)
	if got := drain(f.c.nodeQ); !slices.Equal(got, []string{"n2"}) {
		t.Fatalf("the recheck queued %q, want only n2, which no event brought back", got)
	}
}
