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
	waitFor := func(want int64) {
		for {
			n, err := client.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{})
			if err == nil && n.Annotations["counter"] == strconv.FormatInt(want, 10) {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	s.Trigger()
	waitFor(0)
	var totalPatches int64
	var totalDelay time.Duration
	b.ResetTimer()
	for range b.N {
		before := patches.Load()
		for range 50 {
			value.Add(1)
			s.Trigger()
			time.Sleep(2 * time.Millisecond)
		}
		last := time.Now()
		waitFor(value.Load())
		totalDelay += time.Since(last)
		totalPatches += patches.Load() - before
	}
	b.ReportMetric(float64(totalPatches)/float64(b.N), "patches/burst")
	b.ReportMetric(float64(totalDelay.Milliseconds())/float64(b.N), "ms-after-last-change")
}
