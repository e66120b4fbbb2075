package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"nodeconfig.io/services/api/v1alpha1"
)

// activeWatch follows every Node's config-status annotation and notes when
// each first shows the expected config active and last-known-good. Counts
// are kept as events arrive, so that an event costs the harness one node's
// work, not a rescan of the whole fleet.
type activeWatch struct {
	client kubernetes.Interface
	// n nodes report (run a statusd); sel of them are selected.
	n, sel int
	mu     sync.Mutex
	cond   *sync.Cond
	status map[string]corev1.NodeConfigStatus
	seen   map[string]time.Time // node -> when its status last changed
	// The expected config and who shows it.
	want     string
	activeAt map[string]time.Time
	promoted map[string]bool
}

func newActiveWatch(client kubernetes.Interface, n, sel int) *activeWatch {
	w := &activeWatch{client: client, n: n, sel: sel, status: map[string]corev1.NodeConfigStatus{}, seen: map[string]time.Time{}}
	w.cond = sync.NewCond(&w.mu)
	w.expectLocked("")
	return w
}

func (w *activeWatch) run(ctx context.Context) {
	factory := informers.NewSharedInformerFactory(w.client, 0)
	note := func(obj any) {
		node, ok := obj.(*corev1.Node)
		if !ok {
			return
		}
		if _, fleet := node.Labels[label]; !fleet {
			return // the write probe's Nodes are not the fleet's
		}
		st, ok, err := v1alpha1.NodeConfigStatusOf(node.Annotations)
		if !ok || err != nil {
			return
		}
		now := time.Now()
		w.mu.Lock()
		w.status[node.Name] = st
		w.seen[node.Name] = now
		w.countLocked(node.Name, st, now)
		w.cond.Broadcast()
		w.mu.Unlock()
	}
	_, _ = factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: note, UpdateFunc: func(_, obj any) { note(obj) },
	})
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
}

func (w *activeWatch) countLocked(name string, st corev1.NodeConfigStatus, at time.Time) {
	if w.want == "" {
		return
	}
	if _, ok := w.activeAt[name]; !ok && rv(st.Active) == w.want {
		w.activeAt[name] = at
	}
	if rv(st.LastKnownGood) == w.want {
		w.promoted[name] = true
	}
}

// expectLocked starts counting for a new config; statuses already showing
// it count with the time they were seen.
func (w *activeWatch) expectLocked(want string) {
	w.want, w.activeAt, w.promoted = want, map[string]time.Time{}, map[string]bool{}
	for name, st := range w.status {
		w.countLocked(name, st, w.seen[name])
	}
}

// wait blocks until done holds or timeout.
func (w *activeWatch) wait(ctx context.Context, timeout time.Duration, what string, done func() (bool, string)) error {
	wake := func() { w.mu.Lock(); w.cond.Broadcast(); w.mu.Unlock() }
	deadline := time.AfterFunc(timeout, wake)
	defer deadline.Stop()
	defer context.AfterFunc(ctx, wake)()
	end := time.Now().Add(timeout)
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		ok, progress := done()
		if ok {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("waiting for %s (%s): %w", what, progress, context.Cause(ctx))
		}
		if time.Now().After(end) {
			return fmt.Errorf("timed out after %v waiting for %s: %s", timeout, what, progress)
		}
		w.cond.Wait()
	}
}

func (w *activeWatch) waitReported(ctx context.Context, timeout time.Duration) error {
	return w.wait(ctx, timeout, "every node's first status", func() (bool, string) {
		return len(w.status) == w.n, fmt.Sprintf("%d of %d reported", len(w.status), w.n)
	})
}

func rv(src *corev1.NodeConfigSource) string {
	if src == nil || src.ConfigMap == nil {
		return ""
	}
	return src.ConfigMap.ResourceVersion
}

// latencies are per-node times from the change to "active" on the Node.
type latencies []time.Duration

func (l latencies) pct(p int) time.Duration {
	s := slices.Clone(l)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func (l latencies) all() time.Duration { return slices.Max(l) }

func (w *activeWatch) waitActive(ctx context.Context, want string, start time.Time, timeout time.Duration) (latencies, error) {
	w.expect(want)
	return w.waitActiveCount(ctx, start, timeout, w.sel)
}

// expect starts counting the nodes that show want active.
func (w *activeWatch) expect(want string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.expectLocked(want)
}

// waitActiveCount waits until count nodes show the expected config
// active, and returns their times since start.
func (w *activeWatch) waitActiveCount(ctx context.Context, start time.Time, timeout time.Duration, count int) (latencies, error) {
	err := w.wait(ctx, timeout, fmt.Sprintf("%d nodes active on %s", count, w.want), func() (bool, string) {
		return len(w.activeAt) >= count, fmt.Sprintf("%d of %d active", len(w.activeAt), w.sel)
	})
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(latencies, 0, len(w.activeAt))
	for _, at := range w.activeAt {
		out = append(out, at.Sub(start))
	}
	return out, nil
}

// activeSoFar is how many nodes show the expected config active.
func (w *activeWatch) activeSoFar() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.activeAt)
}

// promotedSoFar is how many nodes show the expected config promoted.
func (w *activeWatch) promotedSoFar() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.promoted)
}

func (w *activeWatch) waitPromoted(ctx context.Context, want string, timeout time.Duration) error {
	return w.wait(ctx, timeout, "every node promoted to "+want, func() (bool, string) {
		return len(w.promoted) == w.sel, fmt.Sprintf("%d of %d promoted", len(w.promoted), w.sel)
	})
}
