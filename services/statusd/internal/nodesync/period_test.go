package nodesync

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"nodeconfig.io/services/statusd/internal/setters"
)

// The period's sync is the safety net for a change nobody announced: once
// the syncer has settled, it finds a change that comes with no Trigger.
func TestThePeriodsSyncFindsAChangeNobodyAnnounced(t *testing.T) {
	client := fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}})
	var value atomic.Int64
	s := New(Options{
		Client: client, NodeName: "n", SyncPeriod: 50 * time.Millisecond,
		Setters: func() []setters.Named {
			return []setters.Named{{Name: "value", Set: func(_ context.Context, n *corev1.Node) error {
				if n.Annotations == nil {
					n.Annotations = map[string]string{}
				}
				n.Annotations["value"] = strconv.FormatInt(value.Load(), 10)
				return nil
			}}}
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()

	shows := func(v int64) {
		t.Helper()
		want := strconv.FormatInt(v, 10)
		err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			n, err := client.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{})
			return err == nil && n.Annotations["value"] == want, nil
		})
		if err != nil {
			t.Fatalf("the Node's value never became %s: %v", want, err)
		}
	}
	// settled waits for a sync that found nothing to send after the Node
	// showed the value: the patch's own Node event has been synced, so
	// nothing but the period syncs again.
	settled := func() {
		t.Helper()
		before := counterValue(s.m.skipped)
		err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return counterValue(s.m.skipped) > before, nil
		})
		if err != nil {
			t.Fatalf("no sync found the Node settled: %v", err)
		}
	}
	shows(0)
	for _, v := range []int64{1, 2} {
		settled()
		value.Store(v) // no Trigger
		shows(v)
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}
