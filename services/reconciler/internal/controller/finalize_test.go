package controller

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/workqueue"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
)

var poolANodes = []string{"n1", "n2", "n3"}

// rolledOut is a fixture whose three pool=a nodes (in the caches and the
// fake API) run NodeConfig nc's config as last-known-good.
func rolledOut(t *testing.T, nc *v1alpha1.NodeConfig) (*fixture, map[string]*fakeAgent) {
	t.Helper()
	f := newFixture(t)
	agents := map[string]*fakeAgent{}
	for _, n := range poolANodes {
		agents[n] = f.addNode(n, map[string]string{"pool": "a"})
		// finalize patches the Nodes through the API.
		obj, _, _ := f.nodes.GetByKey(n)
		node := &corev1.Node{ObjectMeta: *obj.(*metav1.PartialObjectMetadata).ObjectMeta.DeepCopy()}
		if _, err := f.kube.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.addConfigMap("ns", "cfg", "10", map[string]string{"k": "maxPods: 1\n"})
	f.setNodeConfig(nc)
	for round := 0; ; round++ {
		f.syncAll(poolANodes...)
		done := true
		for _, n := range poolANodes {
			done = done && f.state(n) == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ACTIVE
		}
		if done {
			break
		}
		if round == 10 {
			t.Fatal("setup: the nodes never all became active")
		}
		f.now = f.now.Add(61 * time.Second)
	}
	return f, agents
}

// deleting marks nc deleted (its finalizer holds it) in the cache and the
// fake API.
func (f *fixture) deleting(nc *v1alpha1.NodeConfig) {
	f.t.Helper()
	d := *nc
	d.DeletionTimestamp = &metav1.Time{Time: f.now}
	f.setNodeConfig(&d)
}

// catchUp puts the NodeConfig as the fake API stores it into the cache, as
// the informer would.
func (f *fixture) catchUp(name string) {
	f.t.Helper()
	nc, err := f.api.NodeConfigV1alpha1().NodeConfigs().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	f.cacheNodeConfig(nc)
}

// statusWrites counts the NodeConfig status writes sent to the fake API.
func (f *fixture) statusWrites() int {
	n := 0
	for _, a := range f.api.Actions() {
		if a.GetVerb() == "update" && a.GetSubresource() == "status" {
			n++
		}
	}
	return n
}

func (f *fixture) hasFinalizer(name string) bool {
	f.t.Helper()
	return slices.Contains(f.storedNodeConfig(name).Finalizers, v1alpha1.Finalizer)
}

// A completed rollout: Ready AllNodesActive, Progressing False
// RolloutComplete, Degraded False AsExpected, and one Normal
// RolloutComplete event; a status sync after it writes nothing.
func TestCompletedRolloutReasons(t *testing.T) {
	f, _ := rolledOut(t, poolA("nc", v1alpha1.Rollout{}))
	f.events() // the nodes' own
	f.syncNodeConfig("nc")
	f.catchUp("nc")
	writes := f.statusWrites()
	f.syncNodeConfig("nc")
	if w := f.statusWrites() - writes; w != 0 {
		t.Errorf("%d status writes by a sync that changed nothing, want 0", w)
	}
	nc := f.storedNodeConfig("nc")
	for _, want := range []struct {
		typ    string
		status metav1.ConditionStatus
		reason string
	}{
		{v1alpha1.ConditionReady, metav1.ConditionTrue, "AllNodesActive"},
		{v1alpha1.ConditionProgressing, metav1.ConditionFalse, "RolloutComplete"},
		{v1alpha1.ConditionDegraded, metav1.ConditionFalse, "AsExpected"},
	} {
		c := meta.FindStatusCondition(nc.Status.Conditions, want.typ)
		if c == nil || c.Status != want.status || c.Reason != want.reason {
			t.Errorf("%s condition %+v, want %s/%s", want.typ, c, want.status, want.reason)
		}
	}
	if nc.Status.Selected != 3 || nc.Status.Active != 3 || nc.Status.ObservedGeneration != nc.Generation {
		t.Errorf("selected %d active %d observedGeneration %d, want 3, 3 and %d", nc.Status.Selected, nc.Status.Active, nc.Status.ObservedGeneration, nc.Generation)
	}
	var complete []string
	for _, e := range f.events() {
		if strings.HasPrefix(e, "Normal RolloutComplete") {
			complete = append(complete, e)
		}
	}
	if len(complete) != 1 {
		t.Fatalf("RolloutComplete events %q, want one", complete)
	}
}

// Deleting a NodeConfig under the default policy resets each of its nodes
// to the local default first; only then does the finalizer go.
func TestDeletionResetsTheNodesThenRemovesTheFinalizer(t *testing.T) {
	// Every node at once: the departure's pace is leave_test.go's.
	all := intstr.FromString("100%")
	nc := poolA("nc", v1alpha1.Rollout{MaxInTrial: &all})
	f, agents := rolledOut(t, nc)
	f.syncNodeConfig("nc")
	f.deleting(nc)

	after, err := f.c.syncNodeConfig(context.Background(), "nc")
	if err != nil {
		t.Fatal(err)
	}
	if !f.hasFinalizer("nc") {
		t.Fatal("the finalizer went before any node was reset")
	}
	if after <= 0 || f.c.nodeQ.Len() == 0 {
		t.Fatalf("finalize looks again in %v with %d nodes queued; want a requeue and the nodes' syncs asked for", after, f.c.nodeQ.Len())
	}
	for _, n := range poolANodes {
		if w := agents[n].writes(); slices.Contains(w, "Reset") {
			t.Fatalf("%s was reset by the NodeConfig's sync itself (writes %v); its node sync does that", n, w)
		}
	}

	f.syncAll(poolANodes...)
	for _, n := range poolANodes {
		if got := f.state(n); got != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_LOCAL_DEFAULT {
			t.Errorf("%s is %v after its sync, want LOCAL_DEFAULT", n, got)
		}
		if !slices.Contains(agents[n].writes(), "Reset") {
			t.Errorf("%s was not reset: writes %v", n, agents[n].writes())
		}
		if r := agents[n].records(); r.GetAssigned() != nil || r.GetActive() != nil || r.GetLastKnownGood() != nil {
			t.Errorf("%s still records a config after the reset: %v", n, r)
		}
	}
	f.syncNodeConfig("nc")
	if f.hasFinalizer("nc") {
		t.Fatal("every node is reset but the finalizer stayed")
	}
}

// With nodeconfig.io/deletion-policy: abandon, the nodes are marked
// abandoned and keep their config, now and once the NodeConfig is gone.
func TestDeletionWithAbandonMarksTheNodesAndLeavesThem(t *testing.T) {
	nc := poolA("nc", v1alpha1.Rollout{})
	nc.Annotations = map[string]string{v1alpha1.AnnotationDeletionPolicy: v1alpha1.DeletionPolicyAbandon}
	f, agents := rolledOut(t, nc)
	f.syncNodeConfig("nc")
	before := map[string][]string{}
	for _, n := range poolANodes {
		before[n] = agents[n].writes()
	}
	f.deleting(nc)
	f.syncNodeConfig("nc")
	if f.hasFinalizer("nc") {
		t.Fatal("the finalizer stayed under the abandon policy")
	}
	for _, n := range poolANodes {
		node, err := f.kube.CoreV1().Nodes().Get(context.Background(), n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := node.Annotations[v1alpha1.AnnotationAbandoned]; got != "nc" {
			t.Errorf("%s: %s is %q, want nc", n, v1alpha1.AnnotationAbandoned, got)
		}
		// The informer brings the mark to the cache.
		if err := f.nodes.Update(nodeMeta(node.ObjectMeta)); err != nil {
			t.Fatal(err)
		}
	}

	// The nodes' syncs while the NodeConfig is deleting, then once it is
	// gone, leave them as they are.
	f.syncAll(poolANodes...)
	obj, _, _ := f.ncs.GetByKey("nc")
	if err := f.ncs.Delete(obj); err != nil {
		t.Fatal(err)
	}
	f.syncAll(poolANodes...)
	for _, n := range poolANodes {
		if w := agents[n].writes(); !slices.Equal(w, before[n]) {
			t.Errorf("%s was changed after the abandon: writes %v, were %v", n, w, before[n])
		}
		if r := agents[n].records(); r.GetActive() == nil || r.GetLastKnownGood() == nil {
			t.Errorf("%s lost its config: %v", n, r)
		}
		if got := f.state(n); got != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ACTIVE {
			t.Errorf("%s is %v, want ACTIVE (left on its config)", n, got)
		}
	}
}

// A status write refused with 409 Conflict is not an error: the
// NodeConfig is queued again, and the write that follows carries the whole
// status, its event included.
func TestStatusConflictIsRequeuedAndNothingLost(t *testing.T) {
	f, _ := rolledOut(t, poolA("nc", v1alpha1.Rollout{}))
	f.events()
	conflicts := 0
	f.api.PrependReactor("update", "nodeconfigs", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "status" || conflicts > 0 {
			return false, nil, nil
		}
		conflicts++
		return true, nil, apierrors.NewConflict(v1alpha1.Resource("nodeconfigs"), "nc", nil)
	})
	// A queue of its own: the node syncs above left the NodeConfig queued
	// (status coalescing), and only the conflict may queue it here.
	f.c.ncQ.ShutDown()
	f.c.ncQ = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f.c.ncQ.Add("nc")
	if !f.c.processNext(ctx, "nodeconfigs", f.c.ncQ, f.c.syncNodeConfig) {
		t.Fatal("the queue shut down")
	}
	if conflicts != 1 {
		t.Fatalf("%d conflicts, want the status write refused once", conflicts)
	}
	if c := meta.FindStatusCondition(f.storedNodeConfig("nc").Status.Conditions, v1alpha1.ConditionReady); c != nil {
		t.Fatalf("a refused write stored a status: %+v", c)
	}
	for _, e := range f.events() {
		if strings.HasPrefix(e, "Normal RolloutComplete") {
			t.Fatalf("an event for a status that was not written: %s", e)
		}
	}
	if n := f.c.ncQ.NumRequeues("nc"); n != 0 {
		t.Fatalf("a conflict counted as a failure (%d requeues with backoff)", n)
	}

	// The worker gets the NodeConfig again (after about a second).
	requeued := make(chan bool, 1)
	go func() { requeued <- f.c.processNext(ctx, "nodeconfigs", f.c.ncQ, f.c.syncNodeConfig) }()
	select {
	case ok := <-requeued:
		if !ok {
			t.Fatal("the queue shut down")
		}
	case <-ctx.Done():
		t.Fatal("the NodeConfig was not queued again within 10 s of the conflict")
	}
	nc := f.storedNodeConfig("nc")
	if c := meta.FindStatusCondition(nc.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue || c.Reason != "AllNodesActive" {
		t.Fatalf("after the retry Ready is %+v, want True/AllNodesActive", c)
	}
	if nc.Status.Selected != 3 || nc.Status.Active != 3 {
		t.Fatalf("after the retry selected %d active %d, want 3 and 3", nc.Status.Selected, nc.Status.Active)
	}
	var complete []string
	for _, e := range f.events() {
		if strings.HasPrefix(e, "Normal RolloutComplete") {
			complete = append(complete, e)
		}
	}
	if len(complete) != 1 {
		t.Fatalf("RolloutComplete events after the retry %q, want one", complete)
	}
}
