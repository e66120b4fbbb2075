package history

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"nodeconfig.io/services/api/v1alpha1"
)

// fixture is a Store on a fake API server whose cache is refreshed by
// hand, as an informer would after each write.
type fixture struct {
	t     *testing.T
	kube  *fake.Clientset
	index cache.Indexer
	store *Store
	now   time.Time
}

func newFixture(t *testing.T, limit int) *fixture {
	f := &fixture{t: t, kube: fake.NewClientset(), index: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		now: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	f.store = New(f.kube.AppsV1(), f.index, "nodeconfig-system", limit, func() time.Time { return f.now })
	return f
}

// record runs Record a second after the last one and refreshes the cache.
func (f *fixture) record(nc *v1alpha1.NodeConfig, r Rollout) {
	f.t.Helper()
	f.now = f.now.Add(time.Second)
	if err := f.store.Record(context.Background(), nc, r); err != nil {
		f.t.Fatal(err)
	}
	list, err := f.kube.AppsV1().ControllerRevisions("nodeconfig-system").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	objs := []any{}
	for i := range list.Items {
		objs = append(objs, &list.Items[i])
	}
	if err := f.index.Replace(objs, ""); err != nil {
		f.t.Fatal(err)
	}
}

// outcomes are the revisions by number: their outcome annotation.
func (f *fixture) outcomes(nc *v1alpha1.NodeConfig) map[int64]string {
	f.t.Helper()
	revs, err := f.store.Of(nc)
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[int64]string{}
	for _, cr := range revs {
		out[cr.Revision] = cr.Annotations[v1alpha1.AnnotationRolloutOutcome]
	}
	return out
}

func nodeConfig() *v1alpha1.NodeConfig {
	return &v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "workers", UID: types.UID("nc-uid")}}
}

func cmVersion(rv, payload string) Rollout {
	return Rollout{Payload: []byte(payload), Outcome: v1alpha1.OutcomeRollingOut,
		Source: v1alpha1.RevisionSource{Namespace: "cfg", Name: "kubelet", UID: "cm-uid", ResourceVersion: rv, Key: "config.yaml"}}
}

// Each new ConfigMap version becomes the next revision, owned by the
// NodeConfig, holding the payload, its digest and its source; one left
// while rolling out is superseded, one promoted stays promoted.
func TestRecordNumbersVersionsAndEndsTheirRollouts(t *testing.T) {
	f := newFixture(t, DefaultLimit)
	nc := nodeConfig()
	v1 := cmVersion("100", "maxPods: 10\n")
	f.record(nc, v1)
	f.record(nc, v1) // the same version: no new revision
	v1.Outcome = v1alpha1.OutcomePromoted
	f.record(nc, v1)
	f.record(nc, cmVersion("200", "maxPods: 20\n"))
	f.record(nc, cmVersion("300", "maxPods: 30\n"))

	want := map[int64]string{1: v1alpha1.OutcomePromoted, 2: v1alpha1.OutcomeSuperseded, 3: v1alpha1.OutcomeRollingOut}
	if got := f.outcomes(nc); !maps.Equal(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	p, err := f.store.Get(nc, 2)
	if err != nil {
		t.Fatal(err)
	}
	cr, d := p.Revision, p.Data
	if string(d.Payload) != "maxPods: 20\n" || d.Source.ResourceVersion != "200" || d.Source.Key != "config.yaml" || len(d.SHA256) != 64 ||
		cr.Annotations[v1alpha1.AnnotationRevisionOf] != "cm-uid/200/config.yaml" {
		t.Fatalf("revision 2 holds %+v", d)
	}
	if cr.Labels[v1alpha1.LabelHistoryOf] != "workers" || len(cr.OwnerReferences) != 1 || cr.OwnerReferences[0].UID != nc.UID || cr.OwnerReferences[0].Kind != "NodeConfig" {
		t.Fatalf("revision 2 is not labelled with and owned by its NodeConfig: %+v", cr.ObjectMeta)
	}
	if cur := v1alpha1.CurrentRevision(mustOf(t, f.store, nc)); cur.Revision != 3 {
		t.Fatalf("current revision %d, want 3", cur.Revision)
	}
}

// Pinning an old revision makes it current again (its rollout restarts),
// supersedes the one rolling out, and creates no revision.
func TestRecordPinnedRevisionBecomesCurrent(t *testing.T) {
	f := newFixture(t, DefaultLimit)
	nc := nodeConfig()
	f.record(nc, cmVersion("100", "maxPods: 10\n"))
	f.record(nc, cmVersion("200", "maxPods: 20\n"))
	before := v1alpha1.RevisionStarted(mustGet(t, f.store, nc, 1))
	f.record(nc, Rollout{Pinned: 1, Outcome: v1alpha1.OutcomeRollingOut})

	want := map[int64]string{1: v1alpha1.OutcomeRollingOut, 2: v1alpha1.OutcomeSuperseded}
	if got := f.outcomes(nc); !maps.Equal(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	if cur := v1alpha1.CurrentRevision(mustOf(t, f.store, nc)); cur.Revision != 1 {
		t.Fatalf("current revision %d, want 1", cur.Revision)
	}
	if after := v1alpha1.RevisionStarted(mustGet(t, f.store, nc, 1)); !after.After(before) {
		t.Fatalf("revision 1's rollout start %v did not move past %v", after, before)
	}
	if _, err := f.store.Get(nc, 7); !errors.Is(err, ErrNoRevision) {
		t.Fatalf("revision 7: %v, want ErrNoRevision", err)
	}
}

// Beyond the limit the oldest revisions go, but never the pinned one.
func TestRecordPrunesOldestButKeepsPinned(t *testing.T) {
	f := newFixture(t, 3)
	nc := nodeConfig()
	f.record(nc, cmVersion("100", "a: 1\n"))
	f.record(nc, cmVersion("200", "a: 2\n"))
	f.record(nc, cmVersion("300", "a: 3\n"))
	f.record(nc, Rollout{Pinned: 1, Outcome: v1alpha1.OutcomeRollingOut})
	f.store.limit = 2
	f.record(nc, Rollout{Pinned: 1, Outcome: v1alpha1.OutcomeRollingOut})
	want := map[int64]string{1: v1alpha1.OutcomeRollingOut, 3: v1alpha1.OutcomeSuperseded}
	if got := f.outcomes(nc); !maps.Equal(got, want) {
		t.Fatalf("revisions kept %v, want %v: the oldest unpinned one, 2, goes", got, want)
	}
	f.record(nc, cmVersion("400", "a: 4\n"))
	want = map[int64]string{3: v1alpha1.OutcomeSuperseded, 4: v1alpha1.OutcomeRollingOut}
	if got := f.outcomes(nc); !maps.Equal(got, want) {
		t.Fatalf("revisions kept %v, want %v once unpinned", got, want)
	}
}

// A revision of an earlier NodeConfig of the same name is not this one's.
func TestOfIgnoresRevisionsOfAnotherOwner(t *testing.T) {
	f := newFixture(t, DefaultLimit)
	old := nodeConfig()
	f.record(old, cmVersion("100", "a: 1\n"))
	recreated := nodeConfig()
	recreated.UID = "nc-uid-2"
	if revs := mustOf(t, f.store, recreated); len(revs) != 0 {
		t.Fatalf("the recreated NodeConfig sees %d revisions of its predecessor", len(revs))
	}
	f.record(recreated, cmVersion("100", "a: 1\n"))
	if revs := mustOf(t, f.store, recreated); len(revs) != 1 || revs[0].Revision != 1 || revs[0].Name == mustGet(t, f.store, old, 1).Name {
		t.Fatalf("the recreated NodeConfig's revisions: %v", revs)
	}
}

func TestPrunable(t *testing.T) {
	revs := []*appsv1.ControllerRevision{{Revision: 1}, {Revision: 2}, {Revision: 3}, {Revision: 4}}
	numbers := func(rs []*appsv1.ControllerRevision) []int64 {
		var out []int64
		for _, r := range rs {
			out = append(out, r.Revision)
		}
		return out
	}
	for _, tc := range []struct {
		limit int
		keep  []int64
		want  []int64
	}{
		{4, nil, nil},
		{2, []int64{4}, []int64{1, 2}},
		{2, []int64{4, 1}, []int64{2, 3}},
		{0, []int64{4}, []int64{1, 2, 3}},
	} {
		if got := numbers(Prunable(revs, tc.limit, tc.keep...)); !slices.Equal(got, tc.want) {
			t.Errorf("Prunable(limit %d, keep %v) = %v, want %v", tc.limit, tc.keep, got, tc.want)
		}
	}
}

func mustOf(t *testing.T, s *Store, nc *v1alpha1.NodeConfig) []*appsv1.ControllerRevision {
	t.Helper()
	revs, err := s.Of(nc)
	if err != nil {
		t.Fatal(err)
	}
	return revs
}

func mustGet(t *testing.T, s *Store, nc *v1alpha1.NodeConfig, n int64) *appsv1.ControllerRevision {
	t.Helper()
	p, err := s.Get(nc, n)
	if err != nil {
		t.Fatal(err)
	}
	return p.Revision
}

// A NodeConfig synced again before the informer shows the revision the
// store created creates nothing again. (Its patches are overlaid the same
// way, by resourceVersion, which the fake API server does not set.)
func TestRecordAgainBeforeTheCacheCatchesUpWritesNothing(t *testing.T) {
	f := newFixture(t, DefaultLimit)
	nc := nodeConfig()
	f.record(nc, cmVersion("100", "a: 1\n"))
	for _, r := range []Rollout{cmVersion("200", "a: 2\n")} {
		if err := f.store.Record(context.Background(), nc, r); err != nil {
			t.Fatal(err)
		}
		writes := len(f.kube.Actions())
		if err := f.store.Record(context.Background(), nc, r); err != nil {
			t.Fatal(err)
		}
		if again := f.kube.Actions()[writes:]; len(again) != 0 {
			t.Fatalf("the same rollout recorded again before the cache caught up wrote %v", again)
		}
	}
}

// A revision replaced before its end was noted is promoted if it reached
// every node, superseded if not.
func TestRecordNotesAnUnnotedPromotionWhenReplaced(t *testing.T) {
	f := newFixture(t, DefaultLimit)
	nc := nodeConfig()
	f.record(nc, cmVersion("100", "a: 1\n"))
	v2 := cmVersion("200", "a: 2\n")
	v2.Promoted = func(p *Pinned) bool { return p.Revision.Revision == 1 }
	f.record(nc, v2)
	v3 := cmVersion("300", "a: 3\n")
	v3.Promoted = func(*Pinned) bool { return false }
	f.record(nc, v3)
	want := map[int64]string{1: v1alpha1.OutcomePromoted, 2: v1alpha1.OutcomeSuperseded, 3: v1alpha1.OutcomeRollingOut}
	if got := f.outcomes(nc); !maps.Equal(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
}
