// Package drain empties the agent's own node before a kubelet change that
// needs it: it cordons the Node, evicts its pods through the Eviction API
// (policy/v1, so that their PodDisruptionBudgets hold) until none is left
// or a deadline passes, and uncordons the Node again. It only talks to the
// API server: when to drain, and the records of it, are the lifecycle's.
//
// A drain leaves alone the pods it could not move: DaemonSet pods and
// mirror (static) pods, which no eviction takes off the node, the agent's
// own among them; and pods that tolerate the node.kubernetes.io/unschedulable
// taint, which the scheduler would put right back on the cordoned node.
// Finished pods hold nothing and are left too.
package drain

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"nodeconfig.io/services/api/admissionpolicy"
)

// Node drains one node.
type Node struct {
	Kube kubernetes.Interface
	Name string
	// Poll is how often the node's pods are listed again and the evictions
	// a budget refused asked again (0: 2 seconds).
	Poll time.Duration
	Log  *slog.Logger
	// Policy is the ValidatingAdmissionPolicy (with its binding of the
	// same name) that holds the agent's Node patch to spec.unschedulable
	// of its own Node: each cordon checks it is in force first, as statusd
	// checks its own at start (empty: no check).
	Policy string
}

// unschedulableTaint is the taint a cordoned node gets: a pod that
// tolerates it is scheduled onto the node cordoned or not.
var unschedulableTaint = corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}

// Cordoned says whether the node is unschedulable now: an operator's
// cordon, which a drain must not lift after it, or one a drain set.
func (n Node) Cordoned(ctx context.Context) (bool, error) {
	node, err := n.Kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("read Node %s: %w", n.Name, err)
	}
	return node.Spec.Unschedulable, nil
}

// Cordon marks the node unschedulable, once Policy is seen in force: RBAC
// alone lets the agent patch every Node.
func (n Node) Cordon(ctx context.Context) error {
	if n.Policy != "" {
		if err := admissionpolicy.Require(ctx, n.Kube.AdmissionregistrationV1(), n.Policy); err != nil {
			return fmt.Errorf("not cordoning Node %s: %w", n.Name, err)
		}
	}
	return n.setUnschedulable(ctx, true)
}

// Uncordon marks the node schedulable again.
func (n Node) Uncordon(ctx context.Context) error { return n.setUnschedulable(ctx, false) }

// setUnschedulable patches spec.unschedulable alone: the only field of its
// Node the agent may change (deploy/rbac.yaml's nodeconfig-agent-own-node).
func (n Node) setUnschedulable(ctx context.Context, v bool) error {
	patch := fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, v)
	if _, err := n.Kube.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("set spec.unschedulable %t on Node %s: %w", v, n.Name, err)
	}
	return nil
}

// Left is a pod a drain could not move, and why.
type Left struct {
	// Pod is namespace/name.
	Pod string
	Why string
}

// NotDrainedError is a drain that did not finish by its deadline.
type NotDrainedError struct {
	Within time.Duration
	Left   []Left
}

func (e *NotDrainedError) Error() string {
	parts := make([]string, len(e.Left))
	for i, l := range e.Left {
		parts[i] = l.Pod + " (" + l.Why + ")"
	}
	return fmt.Sprintf("the drain did not finish within %s: %d pods left on the node: %s", e.Within, len(e.Left), strings.Join(parts, ", "))
}

// Evict evicts the node's pods until none that a drain moves is left on
// it; when ctx ends first (its deadline is the drain's bound), the error
// is a *NotDrainedError naming the pods left. Evictions a budget refuses
// are asked again every Poll, as kubectl drain does.
func (n Node) Evict(ctx context.Context) error {
	poll := n.Poll
	if poll <= 0 {
		poll = 2 * time.Second
	}
	started := time.Now()
	// why holds the last word on each pod left, by uid.
	why := map[types.UID]string{}
	var left []corev1.Pod
	for {
		pods, err := n.movable(ctx)
		if err != nil && ctx.Err() == nil {
			n.log().Warn("drain: cannot list the node's pods; trying again", "err", err)
		}
		if err == nil {
			left = pods
			if len(left) == 0 {
				return nil
			}
			for _, p := range left {
				if p.DeletionTimestamp != nil {
					why[p.UID] = "terminating since " + p.DeletionTimestamp.UTC().Format(time.RFC3339)
					continue
				}
				// A call the deadline cut short says nothing of the pod.
				if w := n.evict(ctx, p); ctx.Err() == nil {
					why[p.UID] = w
				}
			}
		}
		select {
		case <-ctx.Done():
			return notDrained(time.Since(started), left, why)
		case <-time.After(poll):
		}
	}
}

func notDrained(within time.Duration, pods []corev1.Pod, why map[types.UID]string) error {
	e := &NotDrainedError{Within: within.Round(time.Second)}
	for _, p := range pods {
		w := why[p.UID]
		if w == "" {
			w = "not evicted yet"
		}
		e.Left = append(e.Left, Left{Pod: p.Namespace + "/" + p.Name, Why: w})
	}
	sort.Slice(e.Left, func(i, j int) bool { return e.Left[i].Pod < e.Left[j].Pod })
	return e
}

// evict asks the Eviction API to evict p and says how it went, in words.
func (n Node) evict(ctx context.Context, p corev1.Pod) string {
	ev := &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		// Only this pod: a replacement of the same name is not evicted.
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}},
	}
	err := n.Kube.PolicyV1().Evictions(p.Namespace).Evict(ctx, ev)
	switch {
	case err == nil:
		n.log().Info("drain: evicted", "pod", p.Namespace+"/"+p.Name)
		return "evicted, terminating"
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// Gone already, or another pod by now: the next list tells.
		return "gone"
	case apierrors.IsTooManyRequests(err):
		// A PodDisruptionBudget refuses it for now.
		return "eviction refused: " + explain(err)
	default:
		return "eviction failed: " + err.Error()
	}
}

// explain is an API error's message with its causes (a budget's refusal
// names the budget there).
func explain(err error) string {
	msg := err.Error()
	if st, ok := err.(apierrors.APIStatus); ok && st.Status().Details != nil {
		for _, c := range st.Status().Details.Causes {
			if c.Message != "" && !strings.Contains(msg, c.Message) {
				msg += "; " + c.Message
			}
		}
	}
	return msg
}

// movable lists the node's pods a drain moves.
func (n Node) movable(ctx context.Context) ([]corev1.Pod, error) {
	list, err := n.Kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n.Name).String(),
	})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.Spec.NodeName == n.Name && Moves(&p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// Moves says whether a drain evicts p (see the package's doc).
func Moves(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	if c := metav1.GetControllerOf(p); c != nil && c.Kind == "DaemonSet" {
		return false
	}
	for _, t := range p.Spec.Tolerations {
		if t.ToleratesTaint(klog.Background(), &unschedulableTaint, false) {
			return false
		}
	}
	return true
}

func (n Node) log() *slog.Logger {
	if n.Log == nil {
		return slog.Default()
	}
	return n.Log
}
