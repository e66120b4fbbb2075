package nodesync

import (
	"context"
	"strings"
	"sync"
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

// settleFixture runs a syncer whose one setter writes state into an
// annotation, and records every patch body sent.
func settleFixture(t *testing.T, settleMax time.Duration) (state *atomic.Value, s *Syncer, patches func() []string, client *fake.Clientset) {
	t.Helper()
	client = fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}})
	var mu sync.Mutex
	var sent []string
	client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		sent = append(sent, string(a.(k8stesting.PatchAction).GetPatch()))
		mu.Unlock()
		return false, nil, nil
	})
	state = &atomic.Value{}
	state.Store("idle")
	s = New(Options{
		Client: client, NodeName: "n", SyncPeriod: time.Hour, Quiet: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond,
		Settling: func() bool { return state.Load() == "activating" }, SettleMax: settleMax,
		Setters: func() []setters.Named {
			return []setters.Named{{Name: "state", Set: func(_ context.Context, n *corev1.Node) error {
				if n.Annotations == nil {
					n.Annotations = map[string]string{}
				}
				n.Annotations["state"] = state.Load().(string)
				return nil
			}}}
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = s.Run(ctx) }()
	patches = func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), sent...)
	}
	return state, s, patches, client
}

func waitAnnotation(t *testing.T, client *fake.Clientset, want string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{})
		return err == nil && n.Annotations["state"] == want, nil
	})
	if err != nil {
		t.Fatalf("annotation never became %q: %v", want, err)
	}
}

// A state that passes by itself (assigned, about to be active) is not
// written when the next one follows within SettleMax.
func TestSettlingStateIsNotPatchedWhenItPasses(t *testing.T) {
	state, s, patches, client := settleFixture(t, 10*time.Second)
	s.Trigger()
	waitAnnotation(t, client, "idle")
	state.Store("activating")
	s.Trigger()
	// Past Quiet and MaxDelay, well inside SettleMax.
	time.Sleep(100 * time.Millisecond)
	state.Store("active")
	s.Trigger()
	waitAnnotation(t, client, "active")
	for _, p := range patches() {
		if strings.Contains(p, "activating") {
			t.Fatalf("the settling state was patched: %s", p)
		}
	}
}

// A settling state that lasts is reported after SettleMax: the Node must
// not hide an activation that hangs.
func TestSettlingStateIsPatchedWhenItLasts(t *testing.T) {
	state, s, _, client := settleFixture(t, 50*time.Millisecond)
	s.Trigger()
	waitAnnotation(t, client, "idle")
	state.Store("activating")
	s.Trigger()
	waitAnnotation(t, client, "activating")
}
