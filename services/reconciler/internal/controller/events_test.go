package controller

import (
	"reflect"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/policy"
)

// Warnings are always recorded, on the Node and copied to its NodeConfig;
// Normal transitions only when asked for. Promotions and rollbacks are
// counted either way.
func TestEmitRecordsWarningsAlwaysAndNormalEventsOnlyWhenAsked(t *testing.T) {
	events := []policy.Event{
		{Reason: v1alpha1.EventConfigPromoted, Message: "promoted"},
		{Warning: true, Reason: v1alpha1.EventConfigRolledBack, Message: "rolled back"},
	}
	for _, tc := range []struct {
		normal bool
		want   []string
	}{
		{false, []string{"Warning ConfigRolledBack rolled back", "Warning ConfigRolledBack node n1: rolled back"}},
		{true, []string{"Normal ConfigPromoted promoted", "Warning ConfigRolledBack rolled back", "Warning ConfigRolledBack node n1: rolled back"}},
	} {
		f := newFixture(t)
		f.c.o.NormalNodeEvents = tc.normal
		f.c.emit(nodeMeta(metav1.ObjectMeta{Name: "n1"}), &v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "pool-a"}}, events)
		if got := f.events(); !slices.Equal(got, tc.want) {
			t.Errorf("NormalNodeEvents %v: events %q, want %q", tc.normal, got, tc.want)
		}
		if p, r := testutil.ToFloat64(f.c.metrics.promotions), testutil.ToFloat64(f.c.metrics.rollbacks); p != 1 || r != 1 {
			t.Errorf("NormalNodeEvents %v: %v promotions and %v rollbacks counted, want 1 and 1", tc.normal, p, r)
		}
	}
}

// A node no NodeConfig selects has only its own Events.
func TestEmitWithoutNodeConfigRecordsOnTheNodeOnly(t *testing.T) {
	f := newFixture(t)
	f.c.emit(nodeMeta(metav1.ObjectMeta{Name: "n1"}), nil, []policy.Event{{Warning: true, Reason: v1alpha1.EventUpdateFailed, Message: "no agent"}})
	if got := f.events(); !slices.Equal(got, []string{"Warning UpdateFailed no agent"}) {
		t.Errorf("events %q, want the Node's Warning alone", got)
	}
}

// refRecorder keeps the object of each Event.
type refRecorder struct{ objects []runtime.Object }

func (r *refRecorder) Event(obj runtime.Object, _, _, _ string) { r.objects = append(r.objects, obj) }
func (r *refRecorder) Eventf(obj runtime.Object, _, _, _ string, _ ...any) {
	r.objects = append(r.objects, obj)
}
func (r *refRecorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, _, _, _ string, _ ...any) {
	r.objects = append(r.objects, obj)
}

// A cached Node is metadata only, typed as the API server sends it
// (PartialObjectMetadata); its Events still name the Node itself.
func TestNodeEventsAreRecordedOnTheNode(t *testing.T) {
	f := newFixture(t)
	rec := &refRecorder{}
	f.c.o.Recorder = rec
	node := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
		ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1"}}
	f.c.emit(node, nil, []policy.Event{{Warning: true, Reason: v1alpha1.EventUpdateFailed, Message: "no agent"}})
	want := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: "n1", UID: "uid-n1"}
	if len(rec.objects) != 1 || !reflect.DeepEqual(rec.objects[0], want) {
		t.Errorf("recorded on %+v, want only %+v", rec.objects, want)
	}
}
