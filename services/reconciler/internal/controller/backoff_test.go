package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeconfig.io/services/api/v1alpha1"
)

// An agent out of reach while its Pod restarts: the Pod's and the Node's
// updates bring its node back several times a second and every one of
// those syncs fails. Only a retry that came due may grow the node's
// backoff, so the retry pending when the agent is back is at most the
// outage so far plus the base delay (the delays double, so each is about
// the sum of those before it): the node is synced again by twice the
// outage plus the base after it began, not at the two-minute cap.
func TestEventsDuringAnOutageDoNotCompoundTheBackoff(t *testing.T) {
	f := newFixture(t)
	agent := f.addNode("n1", map[string]string{"pool": "a"})
	f.setNodeConfig(poolA("pool-a", v1alpha1.Rollout{}))
	f.addConfigMap("ns", "cfg", "1", map[string]string{"k": "a: 1"})
	if err := f.syncNode("n1"); err != nil {
		t.Fatal(err)
	}

	const outage, eventEvery = 6 * time.Second, 100 * time.Millisecond
	bound := 2*outage + DefaultBaseDelay
	began := f.now
	f.agents.set("n1", nil)
	q := newFakeRetryQueue(f)
	for f.now.Sub(began) <= 5*time.Minute {
		if f.now.Sub(began) >= outage {
			f.agents.set("n1", agent)
		}
		// Events only while the agent is down: the worst case, where
		// nothing but the retry brings the node back once it is up.
		event := f.now.Sub(began) < outage
		if event || q.due() {
			failed, _ := f.c.NodeInfo("n1")
			if q.sync("n1") == nil {
				if back := f.now.Sub(began); back > bound {
					t.Fatalf("the node synced again %v after a %v outage, want within %v (2 x outage + base); before, %d failures counted, backoff %v",
						back, outage, bound, failed.Failures, failed.Backoff)
				}
				return
			}
		}
		f.now = f.now.Add(eventEvery)
	}
	t.Fatalf("the node never synced again after a %v outage", outage)
}

// fakeRetryQueue does what processNext and the work queue do with one
// node's sync outcomes, on the fixture's clock: a delay brings the key
// back after it (the earliest pending time wins), a failure without one
// takes the rate limiter's next delay.
type fakeRetryQueue struct {
	f       *fixture
	retryAt time.Time // zero: no retry pending
}

func newFakeRetryQueue(f *fixture) *fakeRetryQueue { return &fakeRetryQueue{f: f} }

func (q *fakeRetryQueue) due() bool { return !q.retryAt.IsZero() && !q.f.now.Before(q.retryAt) }

func (q *fakeRetryQueue) sync(node string) error {
	if q.due() {
		q.retryAt = time.Time{}
	}
	after, err := q.f.c.syncNode(context.Background(), node)
	if err == nil {
		q.f.c.nodeRetry.Forget(node)
	} else if after <= 0 {
		after = q.f.c.nodeRetry.When(node)
	}
	if at := q.f.now.Add(after); after > 0 && (q.retryAt.IsZero() || at.Before(q.retryAt)) {
		q.retryAt = at
	}
	return err
}

// An agent Pod that turns Ready drops its node's backoff: the sync its
// update brings counts as the retry, and should it still fail, the next
// try comes after the base delay, not after what the outage earned. An
// update that leaves the Pod as ready as it was drops nothing.
func TestAgentPodTurningReadyDropsTheBackoff(t *testing.T) {
	f := newFixture(t)
	f.addNode("n1", map[string]string{"pool": "a"})
	f.setNodeConfig(poolA("pool-a", v1alpha1.Rollout{}))
	f.addConfigMap("ns", "cfg", "1", map[string]string{"k": "a: 1"})
	f.agents.set("n1", nil)
	for i := range 5 { // five tries, each at its retry's time, each failing
		if i > 0 {
			info, _ := f.c.NodeInfo("n1")
			f.now = info.NextReconcile
		}
		if err := f.syncNode("n1"); err == nil {
			t.Fatal("a sync without its agent succeeded")
		}
	}
	earned, _ := f.c.NodeInfo("n1")
	if earned.Failures != 5 || earned.Backoff < 16*DefaultBaseDelay*4/5 {
		t.Fatalf("after five failed retries: %d failures, backoff %v; want 5 and about 16 x the base", earned.Failures, earned.Backoff)
	}

	_, _, _, pods := f.c.Handlers()
	pod := func(ready corev1.ConditionStatus) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "nodeconfig-system", Name: "checkpointd-x"}, Spec: corev1.PodSpec{NodeName: "n1"},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}}}
	}
	pods.OnUpdate(pod(corev1.ConditionTrue), pod(corev1.ConditionTrue))
	f.now = f.now.Add(time.Second) // before the pending retry
	if err := f.syncNode("n1"); err == nil {
		t.Fatal("a sync without its agent succeeded")
	}
	if info, _ := f.c.NodeInfo("n1"); info.Failures != earned.Failures || !info.NextReconcile.Equal(earned.NextReconcile) {
		t.Fatalf("an update of a Pod that stayed Ready: %d failures, retry at %v; want %d at %v as before", info.Failures, info.NextReconcile, earned.Failures, earned.NextReconcile)
	}

	pods.OnUpdate(pod(corev1.ConditionFalse), pod(corev1.ConditionTrue))
	if got := drain(f.c.nodeQ); !slices.Contains(got, "n1") {
		t.Fatalf("the Pod turning Ready queued %q, want n1", got)
	}
	if err := f.syncNode("n1"); err == nil {
		t.Fatal("a sync without its agent succeeded")
	}
	if info, _ := f.c.NodeInfo("n1"); info.Failures != 1 || info.Backoff > DefaultBaseDelay {
		t.Fatalf("after the agent Pod turned Ready and a sync failed: %d failures, backoff %v; want 1 and at most the base %v", info.Failures, info.Backoff, DefaultBaseDelay)
	}
}
