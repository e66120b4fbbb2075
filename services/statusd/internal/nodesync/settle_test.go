package nodesync

import (
	"context"
	"strings"
	"sync"
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

// settleFixture runs a syncer whose one setter writes the node's state into
// an annotation, and records every patch with the time it was sent.
//
// The syncer asks Settling before every sync it would start; the fixture
// counts the asks that found the state settling, which is the event that
// proves the syncer reached a sync and held it back. The setter projects
// the state that the last ask saw, so a patch shows exactly what the
// syncer decided to write: a state changing between the ask and the
// setter, a race the real setters have too, cannot blur the test.
type settleFixture struct {
	client *fake.Clientset
	s      *Syncer

	// settlingAsks gets one value per Settling ask that found the state
	// settling; asks beyond its buffer are not needed by any test.
	settlingAsks chan struct{}

	mu      sync.Mutex
	state   string // what the node is doing now
	decided string // the state the syncer's last Settling ask saw
	patches []sentPatch
}

type sentPatch struct {
	body string
	at   time.Time
}

func newSettleFixture(t *testing.T, settleMax time.Duration) *settleFixture {
	t.Helper()
	f := &settleFixture{state: "idle", decided: "idle", settlingAsks: make(chan struct{}, 1024)}
	f.client = fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}})
	f.client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.mu.Lock()
		f.patches = append(f.patches, sentPatch{string(a.(k8stesting.PatchAction).GetPatch()), time.Now()})
		f.mu.Unlock()
		return false, nil, nil
	})
	f.s = New(Options{
		Client: f.client, NodeName: "n", SyncPeriod: time.Hour, Quiet: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond,
		Settling: func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.decided = f.state
			if f.state != "activating" {
				return false
			}
			select {
			case f.settlingAsks <- struct{}{}:
			default:
			}
			return true
		},
		SettleMax: settleMax,
		Setters: func() []setters.Named {
			return []setters.Named{{Name: "state", Set: func(_ context.Context, n *corev1.Node) error {
				if n.Annotations == nil {
					n.Annotations = map[string]string{}
				}
				f.mu.Lock()
				n.Annotations["state"] = f.decided
				f.mu.Unlock()
				return nil
			}}}
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = f.s.Run(ctx) }()
	return f
}

func (f *settleFixture) set(state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state = state
}

// sent returns the patches so far.
func (f *settleFixture) sent() []sentPatch {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sentPatch(nil), f.patches...)
}

// waitSettlingAsks waits until the syncer has asked Settling n times and
// found the state settling, or fails the test after 10 s.
func (f *settleFixture) waitSettlingAsks(t *testing.T, n int) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for i := 0; i < n; i++ {
		select {
		case <-f.settlingAsks:
		case <-deadline.C:
			t.Fatalf("the syncer found the state settling %d times in 10 s, want %d", i, n)
		}
	}
}

func (f *settleFixture) waitAnnotation(t *testing.T, want string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := f.client.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{})
		return err == nil && n.Annotations["state"] == want, nil
	})
	if err != nil {
		t.Fatalf("annotation never became %q: %v", want, err)
	}
}

// A state that passes by itself (assigned, about to be active) is not
// written when the next one follows within SettleMax.
func TestSettlingStateIsNotPatchedWhenItPasses(t *testing.T) {
	// SettleMax is far beyond the test, so the window never ends by itself.
	f := newSettleFixture(t, time.Hour)
	f.s.Trigger()
	f.waitAnnotation(t, "idle")
	f.set("activating")
	f.s.Trigger()
	// Three asks that found it settling: the syncer got past Quiet and
	// MaxDelay to a sync three times and held each one back.
	f.waitSettlingAsks(t, 3)
	f.set("active")
	f.s.Trigger()
	f.waitAnnotation(t, "active")
	for _, p := range f.sent() {
		if strings.Contains(p.body, "activating") {
			t.Fatalf("the settling state was patched: %s", p.body)
		}
	}
}

// A settling state that lasts is reported, but not before SettleMax: the
// Node must not hide an activation that hangs, and must not show one that
// could still pass.
func TestSettlingStateIsPatchedWhenItLasts(t *testing.T) {
	const settleMax = 300 * time.Millisecond
	f := newSettleFixture(t, settleMax)
	f.s.Trigger()
	f.waitAnnotation(t, "idle")
	f.set("activating")
	f.s.Trigger()
	f.waitAnnotation(t, "activating")

	// The sync that wrote "activating" began waiting after the sync before
	// it had sent its patch, and a settling state is written only once
	// SettleMax has passed since that wait began: so the two patches are at
	// least SettleMax apart, whatever the scheduler did.
	sent := f.sent()
	if len(sent) < 2 {
		t.Fatalf("%d patches, want the idle one and the activating one", len(sent))
	}
	prev, last := sent[len(sent)-2], sent[len(sent)-1]
	if !strings.Contains(last.body, "activating") || strings.Contains(prev.body, "activating") {
		t.Fatalf("the last two patches are %s and %s; want the activating one last, once", prev.body, last.body)
	}
	if gap := last.at.Sub(prev.at); gap < settleMax {
		t.Fatalf("the settling state was patched %v after the previous patch, inside the %v settle window", gap, settleMax)
	}
}
