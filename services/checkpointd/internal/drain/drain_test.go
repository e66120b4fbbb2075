package drain

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

const node = "node-a"

func pod(ns, name string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func TestMovesOnlyWhatADrainCanMove(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		moves bool
	}{
		{"a Deployment's pod", pod("app", "web", func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", UID: "rs", Controller: ptr.To(true)}}
		}), true},
		{"a bare pod", pod("app", "bare"), true},
		{"a DaemonSet's pod", pod("kube-system", "agent", func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "ds", Controller: ptr.To(true)}}
		}), false},
		{"a mirror pod", pod("kube-system", "etcd-node-a", func(p *corev1.Pod) {
			p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "hash"}
		}), false},
		{"a pod that tolerates the cordon", pod("ops", "stays", func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		}), false},
		{"a pod that tolerates everything", pod("ops", "everywhere", func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		}), false},
		{"a pod that tolerates another taint", pod("ops", "gpu", func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		}), true},
		{"a finished pod", pod("batch", "done", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }), false},
	} {
		if got := Moves(tc.pod); got != tc.moves {
			t.Errorf("%s: Moves = %v, want %v", tc.name, got, tc.moves)
		}
	}
}

// budgetRefusal is the API server's answer to an eviction a
// PodDisruptionBudget forbids.
func budgetRefusal(budget string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: 429, Reason: metav1.StatusReasonTooManyRequests,
		Message: "Cannot evict pod as it would violate the pod's disruption budget.",
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: "DisruptionBudget", Message: "The disruption budget " + budget + " needs 1 healthy pods and has 1 currently"}}},
	}}
}

// evictions makes the fake API server evict as a real one does: the pod
// goes, unless guarded (by namespace/name) refuses it.
func evictions(kube *fake.Clientset, guarded map[string]string) *[]*policyv1.Eviction {
	var mu sync.Mutex
	var seen []*policyv1.Eviction
	kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		mu.Lock()
		seen = append(seen, ev)
		mu.Unlock()
		if budget, ok := guarded[ev.Namespace+"/"+ev.Name]; ok {
			return true, nil, budgetRefusal(budget)
		}
		gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
		return true, nil, kube.Tracker().Delete(gvr, ev.Namespace, ev.Name)
	})
	return &seen
}

func TestEvictNamesThePodsABudgetHolds(t *testing.T) {
	ds := pod("kube-system", "agent", func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "ds", Controller: ptr.To(true)}}
	})
	elsewhere := pod("app", "other-node")
	elsewhere.Spec.NodeName = "node-b"
	kube := fake.NewClientset(pod("app", "web"), pod("app", "blocker"), ds, elsewhere)
	seen := evictions(kube, map[string]string{"app/blocker": "blocker-pdb"})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := Node{Kube: kube, Name: node, Poll: 20 * time.Millisecond}.Evict(ctx)
	var nd *NotDrainedError
	if !errors.As(err, &nd) {
		t.Fatalf("Evict = %v, want a *NotDrainedError", err)
	}
	if len(nd.Left) != 1 || nd.Left[0].Pod != "app/blocker" || !strings.Contains(nd.Left[0].Why, "The disruption budget blocker-pdb needs 1 healthy pods") {
		t.Fatalf("left %+v, want app/blocker refused by its budget", nd.Left)
	}
	if !strings.Contains(err.Error(), "app/blocker (eviction refused: Cannot evict pod as it would violate the pod's disruption budget.") {
		t.Fatalf("message %q does not name the pod and why", err)
	}
	for _, gone := range []string{"web"} {
		if _, err := kube.CoreV1().Pods("app").Get(context.Background(), gone, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("pod app/%s not evicted: %v", gone, err)
		}
	}
	for _, kept := range []struct{ ns, name string }{{"kube-system", "agent"}, {"app", "other-node"}, {"app", "blocker"}} {
		if _, err := kube.CoreV1().Pods(kept.ns).Get(context.Background(), kept.name, metav1.GetOptions{}); err != nil {
			t.Errorf("pod %s/%s: %v; want it left alone", kept.ns, kept.name, err)
		}
	}
	// The refused eviction is asked again, each time for that pod alone.
	refused := 0
	for _, ev := range *seen {
		if ev.Name == "blocker" {
			refused++
			if ev.DeleteOptions == nil || ev.DeleteOptions.Preconditions == nil || *ev.DeleteOptions.Preconditions.UID != "uid-blocker" {
				t.Errorf("eviction of blocker without its uid as precondition: %+v", ev.DeleteOptions)
			}
		}
		if ev.Name == "agent" || ev.Name == "other-node" {
			t.Errorf("evicted %s/%s, which a drain leaves", ev.Namespace, ev.Name)
		}
	}
	if refused < 2 {
		t.Errorf("the refused eviction was asked %d times; want it asked again until the deadline", refused)
	}
}

func TestEvictFinishesOnceThePodsAreGone(t *testing.T) {
	kube := fake.NewClientset(pod("app", "web"), pod("app", "db"))
	evictions(kube, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := (Node{Kube: kube, Name: node, Poll: 10 * time.Millisecond}).Evict(ctx); err != nil {
		t.Fatal(err)
	}
	list, err := kube.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 0 {
		t.Fatalf("pods left: %v, %v", list, err)
	}
}

// A pod evicted but still terminating holds the drain, and says so.
func TestEvictWaitsForTerminatingPods(t *testing.T) {
	p := pod("app", "slow", func(p *corev1.Pod) {
		p.DeletionTimestamp = &metav1.Time{Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
		p.Finalizers = []string{"example.com/hold"}
	})
	kube := fake.NewClientset(p)
	seen := evictions(kube, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := Node{Kube: kube, Name: node, Poll: 20 * time.Millisecond}.Evict(ctx)
	var nd *NotDrainedError
	if !errors.As(err, &nd) || len(nd.Left) != 1 || nd.Left[0].Why != "terminating since 2026-01-02T03:04:05Z" {
		t.Fatalf("Evict = %v", err)
	}
	if len(*seen) != 0 {
		t.Fatalf("evicted a terminating pod again: %d evictions", len(*seen))
	}
}

func TestCordonAndUncordonTouchOnlyUnschedulable(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	n := Node{Kube: kube, Name: node}
	if cordoned, err := n.Cordoned(ctx); err != nil || cordoned {
		t.Fatalf("Cordoned = %v, %v on a schedulable node", cordoned, err)
	}
	if err := n.Cordon(ctx); err != nil {
		t.Fatal(err)
	}
	if cordoned, err := n.Cordoned(ctx); err != nil || !cordoned {
		t.Fatalf("Cordoned = %v, %v after Cordon", cordoned, err)
	}
	if err := n.Uncordon(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); got.Spec.Unschedulable {
		t.Fatal("the Node is unschedulable after Uncordon")
	}
	// Each patch names spec.unschedulable alone (the admission policy
	// allows the agent that field of its Node and nothing else).
	var patches []string
	for _, a := range kube.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			patches = append(patches, string(p.GetPatch()))
		}
	}
	if want := []string{`{"spec":{"unschedulable":true}}`, `{"spec":{"unschedulable":false}}`}; !slices.Equal(patches, want) {
		t.Fatalf("patches %q, want %q", patches, want)
	}
}

// A cordon waits for the admission policy that holds it to spec.unschedulable
// of its own Node: without it the agent's patch could change any Node.
func TestCordonNeedsItsAdmissionPolicy(t *testing.T) {
	ctx := context.Background()
	const policy = "nodeconfig-agent-own-node"
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	n := Node{Kube: kube, Name: node, Policy: policy}
	if err := n.Cordon(ctx); err == nil || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy "+policy+" is missing") {
		t.Fatalf("Cordon without the policy = %v; want it refused, naming the policy", err)
	}
	if got, _ := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); got.Spec.Unschedulable {
		t.Fatal("the Node was cordoned without the policy in force")
	}
	fail := admissionregistrationv1.Fail
	if _, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: policy}, Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{FailurePolicy: &fail},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy},
		Spec:       admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := n.Cordon(ctx); err != nil {
		t.Fatalf("Cordon with the policy in force: %v", err)
	}
	// Uncordon needs no check: lifting the agent's own cordon must not
	// wait on a policy deleted meanwhile.
	if err := (Node{Kube: fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}), Name: node, Policy: policy}).Uncordon(ctx); err != nil {
		t.Fatalf("Uncordon without the policy: %v", err)
	}
}
