package controller

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/history"
)

// withHistory gives the fixture's controller a history in
// "nodeconfig-system" on its fake API server; refresh copies what that
// holds into the cache, as the informer would.
func (f *fixture) withHistory() (refresh func()) {
	f.t.Helper()
	index := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	f.c.o.History = history.New(f.kube.AppsV1(), index, "nodeconfig-system", history.DefaultLimit, func() time.Time { return f.now })
	// The API server gives each object its own uid; the fake gives none,
	// and the history tells revisions apart by it.
	created := 0
	f.kube.PrependReactor("create", "controllerrevisions", func(action k8stesting.Action) (bool, runtime.Object, error) {
		created++
		action.(k8stesting.CreateAction).GetObject().(*appsv1.ControllerRevision).UID = types.UID(fmt.Sprintf("revision-uid-%d", created))
		return false, nil, nil
	})
	return func() {
		f.t.Helper()
		list, err := f.kube.AppsV1().ControllerRevisions("nodeconfig-system").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			f.t.Fatal(err)
		}
		var objs []any
		for i := range list.Items {
			objs = append(objs, &list.Items[i])
		}
		if err := index.Replace(objs, ""); err != nil {
			f.t.Fatal(err)
		}
	}
}

// The version a NodeConfig rolls out becomes revision 1, holding the
// key's bytes alone; pinned once its ConfigMap is gone, the node is
// given those bytes under the revision's own source; an unknown revision
// is an early error naming it.
func TestPinnedRevisionReachesTheNodeAfterItsConfigMapIsGone(t *testing.T) {
	f := newFixture(t)
	refresh := f.withHistory()
	a := f.addNode("n1", map[string]string{"pool": "a"})
	f.addConfigMap("ns", "cfg", "10", map[string]string{"config.yaml": "a: 1\n", "other": "x"})
	nc := &v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "pool-a", Finalizers: []string{v1alpha1.Finalizer}}, Spec: v1alpha1.NodeConfigSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}},
		Source:       &v1alpha1.Source{ConfigMap: &v1alpha1.ConfigMapSource{Namespace: "ns", Name: "cfg", Key: "config.yaml"}},
		SoakSeconds:  60,
	}}
	f.setNodeConfig(nc)
	if err := f.syncNode("n1"); err != nil {
		t.Fatal(err)
	}
	f.syncNodeConfig(nc.Name)
	refresh()
	p, err := f.c.o.History.Get(f.storedNodeConfig(nc.Name), 1)
	if err != nil {
		t.Fatal(err)
	}
	cr, d := p.Revision, p.Data
	if string(d.Payload) != "a: 1\n" || d.Source.ResourceVersion != "10" || cr.Annotations[v1alpha1.AnnotationRolloutOutcome] != v1alpha1.OutcomeRollingOut {
		t.Fatalf("revision 1: %+v, annotations %v", d, cr.Annotations)
	}

	if err := f.cms.Delete(&metav1.ObjectMeta{Namespace: "ns", Name: "cfg"}); err != nil {
		t.Fatal(err)
	}
	nc.Spec.Source.Revision = ptr.To[int64](1)
	nc.Generation++
	f.setNodeConfig(nc)
	if err := f.syncNode("n1"); err != nil {
		t.Fatal(err)
	}
	put := a.puts[len(a.puts)-1]
	if src := put.GetSource(); src.GetUid() != string(cr.UID) || src.GetResourceVersion() != "revision-1" || src.GetKey() != "config.yaml" ||
		!maps.Equal(put.GetData(), map[string]string{"config.yaml": "a: 1\n"}) {
		t.Fatalf("the node was given %v", put)
	}
	if got := a.records().GetAssigned().GetSource().GetResourceVersion(); got != "revision-1" {
		t.Fatalf("the node has %q assigned, want revision-1", got)
	}

	nc.Spec.Source.Revision = ptr.To[int64](5)
	nc.Generation++
	f.setNodeConfig(nc)
	if err := f.syncNode("n1"); err == nil || !strings.Contains(err.Error(), "revision 5 of NodeConfig pool-a: no such revision") {
		t.Fatalf("a sync pinned to an unknown revision: %v", err)
	}
	if got := a.records().GetAssigned().GetSource().GetResourceVersion(); got != "revision-1" {
		t.Fatalf("an unknown revision changed the node's assignment to %q", got)
	}
}

// A version is its bytes: an edit of another key of the ConfigMap (a new
// resourceVersion, the same bytes under the NodeConfig's key) starts no
// trial and gives the node nothing; a change of those bytes does.
func TestAConfigMapEditElsewhereIsNoNewVersion(t *testing.T) {
	f := newFixture(t)
	f.c.o.NodeValidationOnly = true // the fixture has no kubelet validator
	refresh := f.withHistory()
	a := f.addNode("n1", map[string]string{"pool": "a"})
	f.addConfigMap("ns", "cfg", "10", map[string]string{"config.yaml": "a: 1\n", "other": "x"})
	nc := &v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "pool-a", Finalizers: []string{v1alpha1.Finalizer}}, Spec: v1alpha1.NodeConfigSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}},
		Source:       &v1alpha1.Source{ConfigMap: &v1alpha1.ConfigMapSource{Namespace: "ns", Name: "cfg", Key: "config.yaml"}},
		SoakSeconds:  60, Validator: "kubelet",
	}}
	f.setNodeConfig(nc)
	if err := f.syncNode("n1"); err != nil {
		t.Fatal(err)
	}
	f.syncNodeConfig(nc.Name)
	refresh()
	puts := len(a.puts)

	f.addConfigMap("ns", "cfg", "11", map[string]string{"config.yaml": "a: 1\n", "other": "y"})
	if err := f.syncNode("n1"); err != nil {
		t.Fatal(err)
	}
	if got := a.records().GetAssigned().GetSource().GetResourceVersion(); got != "10" || len(a.puts) != puts {
		t.Fatalf("after an edit of another key: assigned %q, %d checkpoints sent (was %d); want 10 kept and nothing sent", got, len(a.puts), puts)
	}
	f.syncNodeConfig(nc.Name)
	if p := meta.FindStatusCondition(f.storedNodeConfig(nc.Name).Status.Conditions, v1alpha1.ConditionProgressing); p == nil ||
		!strings.Contains(p.Message, "changed (resourceVersion 11) but not key config.yaml: still resourceVersion 10's bytes") {
		t.Fatalf("Progressing %+v; want the status to say the edit changed nothing the nodes read", p)
	}

	f.addConfigMap("ns", "cfg", "12", map[string]string{"config.yaml": "# the same, reformatted\n{\"a\": 1}\n", "other": "y"})
	if err := f.syncNode("n1"); err != nil {
		t.Fatal(err)
	}
	if got := a.records().GetAssigned().GetSource().GetResourceVersion(); got != "10" || len(a.puts) != puts {
		t.Fatalf("after the key was reformatted: assigned %q; want 10 kept", got)
	}

	f.addConfigMap("ns", "cfg", "13", map[string]string{"config.yaml": "a: 2\n", "other": "y"})
	if err := f.syncNode("n1"); err != nil {
		t.Fatal(err)
	}
	if got := a.records().GetAssigned().GetSource().GetResourceVersion(); got != "13" {
		t.Fatalf("after the key's bytes changed: assigned %q; want 13", got)
	}
}

// A halted version is undone to the newest revision its nodes run as
// last-known-good, even when the history saw that revision superseded
// before it saw it promoted: the reconciler's view of the node was behind
// when the ConfigMap changed again (seen on the real node, while the agent
// restarted and the node's syncs backed off). Undone to the older revision,
// the node would leave a promoted config for one older still.
func TestUndoGoesBackToWhatTheNodesPromotedThoughTheHistoryMissedIt(t *testing.T) {
	f := newFixture(t)
	f.c.o.NodeValidationOnly = true // the fixture has no kubelet validator
	refresh := f.withHistory()
	a := f.addNode("n1", map[string]string{"pool": "a"})
	f.addConfigMap("ns", "cfg", "10", map[string]string{"k": "a: 1\n"})
	f.setNodeConfig(poolA("nc", v1alpha1.Rollout{}))
	promote := func() {
		t.Helper()
		f.syncAll("n1") // assigned and activated
		f.now = f.now.Add(2 * time.Minute)
		f.syncAll("n1") // soaked: promoted
		f.syncNodeConfig("nc")
		f.catchUp("nc")
		refresh()
	}
	promote()
	f.addConfigMap("ns", "cfg", "11", map[string]string{"k": "a: 2\n"})
	f.syncAll("n1") // revision 2 assigned and activated
	f.syncNodeConfig("nc")
	f.catchUp("nc")
	refresh()

	// The node promotes revision 2 while the reconciler does not see it; the
	// ConfigMap changes again before it does.
	a.mu.Lock()
	a.recs.LastKnownGood = &nodeconfigv1.SourceRecord{Source: a.recs.GetActive().GetSource(), WrittenAt: a.ts()}
	a.mu.Unlock()
	f.addConfigMap("ns", "cfg", "12", map[string]string{"k": "a: 3\n"})
	f.syncNodeConfig("nc")
	f.catchUp("nc")
	refresh()

	// Revision 3 fails on the node and halts (maxFailures 1): undone.
	a.lateError = true
	f.syncAll("n1")
	f.syncNodeConfig("nc")
	f.catchUp("nc")
	refresh()
	a.lateError = false
	f.syncAll("n1")
	if got := a.records().GetAssigned().GetSource().GetResourceVersion(); got == "revision-1" {
		t.Fatalf("the halted revision 3 was undone to revision 1 (a: 1); the node had promoted revision 2 (a: 2), which it still runs: active %s",
			a.records().GetActive().GetSource().GetResourceVersion())
	}
	if got := a.records().GetActive().GetSource().GetResourceVersion(); got != "11" {
		t.Fatalf("after the undo the node runs %q; want 11 (a: 2), its last-known-good", got)
	}
}
