package nodeevents

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

var now = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func rolledBack(reason string, at time.Time) *nodeconfigv1.Records {
	src := func(rv string) *nodeconfigv1.ConfigSource {
		return &nodeconfigv1.ConfigSource{Namespace: "kube-system", Name: "kubelet-config", Uid: "u", ResourceVersion: rv, Key: "config.yaml"}
	}
	return &nodeconfigv1.Records{
		Assigned:      &nodeconfigv1.AssignedRecord{Source: src("2")},
		Active:        &nodeconfigv1.SourceRecord{Source: src("1")},
		LastKnownGood: &nodeconfigv1.SourceRecord{Source: src("1")},
		Error: &nodeconfigv1.ErrorRecord{WrittenAt: timestamppb.New(at), Error: &nodeconfigv1.ConfigError{
			Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE, Reason: reason, Message: "the Node's MemoryPressure is True"}},
	}
}

func teller(kube *fake.Clientset) *Teller {
	return &Teller{Client: kube, Node: "n1", Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }}
}

func events(t *testing.T, kube *fake.Clientset) []corev1.Event {
	t.Helper()
	list, err := kube.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func TestTheNodeTellsOfItsOwnRollbackOnce(t *testing.T) {
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid"}})
	recs := rolledBack(records.ReasonHealthGateFailed, now.Add(-time.Minute))
	teller(kube).Observe(context.Background(), recs)
	// A restarted agent sees the same records: the same Event, not another.
	teller(kube).Observe(context.Background(), recs)
	got := events(t, kube)
	if len(got) != 1 {
		t.Fatalf("%d events; want one", len(got))
	}
	e := got[0]
	if e.Type != corev1.EventTypeWarning || e.Reason != records.ReasonHealthGateFailed || e.InvolvedObject.Kind != "Node" ||
		e.InvolvedObject.Name != "n1" || e.InvolvedObject.UID != "node-uid" || !strings.Contains(e.Message, "MemoryPressure is True") || e.Source.Component != Component {
		t.Fatalf("event %+v; want a Warning on the Node with the rollback's reason and words", e)
	}
	teller(kube).Observe(context.Background(), rolledBack(records.ReasonConsumerUnhealthy, now))
	if got := events(t, kube); len(got) != 2 {
		t.Fatalf("%d events after a second rollback; want two", len(got))
	}
}

func TestTheNodeTellsNothingElse(t *testing.T) {
	kube := fake.NewClientset()
	early := rolledBack(records.ReasonWriteFailed, now)
	early.Error.Error.Phase = nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY
	for what, recs := range map[string]*nodeconfigv1.Records{
		"an early error":                     early,
		"a rollback the reconciler tells of": rolledBack("ValidationFailed", now),
		"an old rollback":                    rolledBack(records.ReasonHealthGateFailed, now.Add(-time.Hour)),
		"no error":                           {},
	} {
		teller(kube).Observe(context.Background(), recs)
		if got := events(t, kube); len(got) != 0 {
			t.Fatalf("%s told: %+v", what, got)
		}
	}
}
