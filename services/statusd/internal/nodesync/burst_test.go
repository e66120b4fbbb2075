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

// burstFixture runs a syncer with statusd's default Quiet and MaxDelay
// whose one setter writes a counter into an annotation, and counts the
// patches that reach the API server. BenchmarkBurstCoalescing and
// TestBurstOfFiftyChangesIsOnePatch share it.
type burstFixture struct {
	client  *fake.Clientset
	s       *Syncer
	ctx     context.Context
	patches atomic.Int64
	value   atomic.Int64
}

// burstChanges and burstPace: 50 setter changes 1.8 ms apart, the last one
// 88 ms after the first when the ticker is on time: inside 100 ms with room
// for a late wake-up (2 ms apart, a burst took just over 100 ms as often as
// not).
const (
	burstChanges = 50
	burstPace    = 1800 * time.Microsecond
)

func newBurstFixture(tb testing.TB) *burstFixture {
	tb.Helper()
	f := &burstFixture{client: fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}})}
	f.client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		f.patches.Add(1)
		return false, nil, nil
	})
	f.s = New(Options{
		Client: f.client, NodeName: "n", SyncPeriod: time.Hour,
		Setters: func() []setters.Named {
			return []setters.Named{{Name: "counter", Set: func(_ context.Context, n *corev1.Node) error {
				if n.Annotations == nil {
					n.Annotations = map[string]string{}
				}
				n.Annotations["counter"] = strconv.FormatInt(f.value.Load(), 10)
				return nil
			}}}
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	f.ctx = ctx
	go func() { _ = f.s.Run(ctx) }()
	return f
}

// burstTiming is how a burst was paced: from its first change to its last,
// and the longest gap between two changes.
type burstTiming struct{ span, maxGap time.Duration }

// burst makes burstChanges changes burstPace apart, each followed by a
// Trigger, and returns how they were paced (a loaded machine can wake the
// ticker's reader late).
func (f *burstFixture) burst() burstTiming {
	// The burst's pace, not a wait for a result.
	tick := time.NewTicker(burstPace)
	defer tick.Stop()
	var bt burstTiming
	first := time.Now()
	prev := first
	for i := range burstChanges {
		if i > 0 {
			<-tick.C
		}
		f.value.Add(1)
		f.s.Trigger()
		now := time.Now()
		bt.maxGap = max(bt.maxGap, now.Sub(prev))
		prev = now
	}
	bt.span = prev.Sub(first)
	return bt
}

// skipped is how many syncs found nothing to send.
func (f *burstFixture) skipped() float64 { return counterValue(f.s.m.skipped) }

// waitFor fails tb if the Node does not show the counter's current value
// within 10 s: a lost change must not hang make bench.
func (f *burstFixture) waitFor(tb testing.TB) {
	tb.Helper()
	want := strconv.FormatInt(f.value.Load(), 10)
	err := wait.PollUntilContextTimeout(f.ctx, time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := f.client.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{})
		return err == nil && n.Annotations["counter"] == want, nil
	})
	if err != nil {
		tb.Fatalf("the Node's counter never became %s: %v", want, err)
	}
}

// waitSettled waits until the Node shows the counter's current value and
// a sync has found nothing more to send since skippedBefore was read: the
// syncer has sent every patch the changes before it cause.
func (f *burstFixture) waitSettled(tb testing.TB, skippedBefore float64) {
	tb.Helper()
	f.waitFor(tb)
	err := wait.PollUntilContextTimeout(f.ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return f.skipped() > skippedBefore, nil
	})
	if err != nil {
		tb.Fatalf("no sync found the Node in step within 10 s of it showing the counter: %v", err)
	}
}

// make test gates what BenchmarkBurstCoalescing only reports: 50 changes
// within 100 ms reach the API server as exactly one patch, three bursts in
// a row. Each burst is counted once the syncer has settled (a later sync
// found nothing to send), so a late second patch would be counted too.
func TestBurstOfFiftyChangesIsOnePatch(t *testing.T) {
	const (
		bursts = 3
		window = 100 * time.Millisecond
		// A burst the machine could not pace within the window is not the
		// case under test; it is made again, at most this many times.
		maxRedo = 10
	)
	f := newBurstFixture(t)
	f.s.Trigger()
	f.waitSettled(t, 0)
	redone := 0
	for done := 0; done < bursts; {
		before, skippedBefore := f.patches.Load(), f.skipped()
		bt := f.burst()
		f.waitSettled(t, skippedBefore)
		got := f.patches.Load() - before
		// A gap of Quiet between two changes makes two bursts by design.
		if bt.span > window || bt.maxGap >= f.s.o.Quiet {
			redone++
			t.Logf("burst paced over %v with a gap of %v (a loaded machine), not within %v with no gap of %v: %d patches, not counted",
				bt.span, bt.maxGap, window, f.s.o.Quiet, got)
			if redone > maxRedo {
				t.Fatalf("%d bursts of %d changes could not be paced within %v; cannot test the coalescing", redone, burstChanges, window)
			}
			continue
		}
		if got != 1 {
			t.Fatalf("burst %d: %d changes within %v reached the API server as %d patches, want 1", done+1, burstChanges, bt.span, got)
		}
		done++
	}
}
