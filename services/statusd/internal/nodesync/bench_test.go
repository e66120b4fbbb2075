package nodesync

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"nodeconfig.io/services/statusd/internal/setters"
)

// BenchmarkBurstCoalescing: 50 setter changes within 100 ms should reach
// the API server as one patch. Reports patches per burst and the delay from
// the last change to the patch.
func BenchmarkBurstCoalescing(b *testing.B) {
	client := fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}})
	var patches atomic.Int64
	client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		patches.Add(1)
		return false, nil, nil
	})
	var value atomic.Int64
	s := New(Options{
		Client: client, NodeName: "n", SyncPeriod: time.Hour,
		Setters: func() []setters.Named {
			return []setters.Named{{Name: "counter", Set: func(_ context.Context, n *corev1.Node) error {
				if n.Annotations == nil {
					n.Annotations = map[string]string{}
				}
				n.Annotations["counter"] = strconv.FormatInt(value.Load(), 10)
				return nil
			}}}
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.Run(ctx) }()
	// waitFor fails the benchmark if the Node does not show want within
	// 10 s: a lost change must not hang make bench.
	waitFor := func(want int64) {
		b.Helper()
		err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			n, err := client.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{})
			return err == nil && n.Annotations["counter"] == strconv.FormatInt(want, 10), nil
		})
		if err != nil {
			b.Fatalf("the Node's counter never became %d: %v", want, err)
		}
	}
	s.Trigger()
	waitFor(0)
	var totalPatches int64
	var totalDelay time.Duration
	b.ResetTimer()
	for range b.N {
		before := patches.Load()
		// The burst's pace, not a wait for a result: 50 changes 2 ms apart.
		tick := time.NewTicker(2 * time.Millisecond)
		for range 50 {
			value.Add(1)
			s.Trigger()
			<-tick.C
		}
		tick.Stop()
		last := time.Now()
		waitFor(value.Load())
		totalDelay += time.Since(last)
		totalPatches += patches.Load() - before
	}
	b.ReportMetric(float64(totalPatches)/float64(b.N), "patches/burst")
	b.ReportMetric(float64(totalDelay.Milliseconds())/float64(b.N), "ms-after-last-change")
}
