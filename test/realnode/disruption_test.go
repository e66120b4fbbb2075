package realnode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"nodeconfig.io/test/framework/nodeview"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/realnode"
)

// cpuManagerState is the kubelet's CPU manager checkpoint on this node (in
// its --root-dir).
var cpuManagerState = filepath.Join(realnode.Root, "kubelet", "cpu_manager_state")

// disruptionByField: changes that need more than a kubelet restart.
//   - cpuManagerPolicy none -> static (with the CPU static needs reserved):
//     the kubelet refuses to start with the old policy's checkpoint, so the
//     agent removes it while the kubelet is down (seen gone on disk here,
//     between the old kubelet's exit and the new one's start), drains the
//     node first (nothing to evict: the install's pods stay), and the
//     kubelet runs static after exactly one start.
//   - topologyManagerScope, which needs a drain, with a PodDisruptionBudget
//     that forbids evicting a test pod: an early DrainFailed naming the
//     pod, the node uncordoned, the kubelet not restarted. Without the
//     budget, the next drain evicts the pod, the kubelet runs the change
//     and the node takes pods again.
//
// The deletion of the NodeConfig after it takes the kubelet back to its
// base config, policy none: the agent removes static's checkpoint then.
func disruptionByField(ctx context.Context, t *testing.T, work string) {
	client := node.Cluster.Client
	before, err := os.ReadFile(cpuManagerState)
	if err != nil || !strings.Contains(string(before), `"policyName":"none"`) {
		t.Fatalf("%s before the change: %q, %v; want the none policy's checkpoint", cpuManagerState, before, err)
	}
	starts := node.Kubelet.Starts()
	gone := watchGoneWhileDown(ctx, t, cpuManagerState)
	runReadmeCommand(ctx, t, work, `printf 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 66\ncpuManagerPolicy: static\nreservedSystemCPUs: "0"\n' > static.yaml && kubectl create configmap kubelet-config -n kube-system --from-file=config.yaml=./static.yaml --dry-run=client -o yaml | kubectl apply -f -`)
	static := configMapVersion(ctx, t)
	// The incident's undo pinned the NodeConfig to a revision: following
	// the ConfigMap again (docs/nodeconfig-api.md) rolls out the change
	// just made, and nothing in between.
	runReadmeCommand(ctx, t, work, `kubectl patch nodeconfig workers --type=json -p '[{"op":"remove","path":"/spec/source/revision"}]'`)
	waitStatus(ctx, t, "cpuManagerPolicy static promoted", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return nodeview.ResourceVersion(st.LastKnownGood) == static && c.Reason == "Active"
	})
	waitKubeletSays(ctx, t, "cpuManagerPolicy", "static")
	if !gone.Load() {
		t.Fatalf("%s was never seen gone while the kubelet was down", cpuManagerState)
	}
	if got := node.Kubelet.Starts() - starts; got != 1 {
		t.Fatalf("%d kubelet starts for the change; want exactly 1 (no crash loop on the old checkpoint)", got)
	}
	after, err := os.ReadFile(cpuManagerState)
	if err != nil || !strings.Contains(string(after), `"policyName":"static"`) {
		t.Fatalf("%s after the change: %q, %v; want static's", cpuManagerState, after, err)
	}
	waitUncordoned(ctx, t)

	// A pod a budget keeps on the node.
	const ns = "disrupt-test"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = client.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), ns, metav1.DeleteOptions{})
	}()
	blocker := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "blocker", Namespace: ns, Labels: map[string]string{"app": "blocker"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			AutomountServiceAccountToken:  ptr.To(false),
			Containers:                    []corev1.Container{{Name: "pause", Image: realnode.PauseImage, ImagePullPolicy: corev1.PullNever}},
		},
	}
	// The namespace's default ServiceAccount, which admission wants, comes
	// a moment after the namespace.
	if err := proc.WaitFor(time.Minute, func() (bool, error) {
		_, err := client.CoreV1().Pods(ns).Create(ctx, blocker, metav1.CreateOptions{})
		return err == nil, err
	}); err != nil {
		t.Fatal(err)
	}
	waitPodRunning(ctx, t, ns, "blocker")
	budget := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "blocker", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "blocker"}},
		},
	}
	if _, err := client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, budget, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitBudgetSeen(ctx, t, ns, "blocker")

	runReadmeCommand(ctx, t, work, `kubectl patch nodeconfig workers --type merge -p '{"spec":{"rollout":{"drain":{"timeoutSeconds":15}}}}'`)
	pid, starts := node.Kubelet.Pid(), node.Kubelet.Starts()
	runReadmeCommand(ctx, t, work, `printf 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 66\ncpuManagerPolicy: static\nreservedSystemCPUs: "0"\ntopologyManagerScope: pod\n' > scope.yaml && kubectl create configmap kubelet-config -n kube-system --from-file=config.yaml=./scope.yaml --dry-run=client -o yaml | kubectl apply -f -`)
	scope := configMapVersion(ctx, t)
	waitCordoned(ctx, t)
	waitStatus(ctx, t, "the drain held by the budget", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return c.Status == corev1.ConditionFalse && c.Reason == "DrainFailed" && strings.Contains(c.Message, ns+"/blocker (eviction refused") &&
			nodeview.ResourceVersion(st.Active) == static && nodeview.ResourceVersion(st.Assigned) == scope
	})
	waitUncordoned(ctx, t)
	if node.Kubelet.Pid() != pid || node.Kubelet.Starts() != starts {
		t.Fatalf("the kubelet was restarted (pid %d, was %d; %d starts, was %d) by a change whose drain failed", node.Kubelet.Pid(), pid, node.Kubelet.Starts(), starts)
	}
	if b, err := os.ReadFile(filepath.Join(realnode.ConfigDir, dropIn)); err != nil || strings.Contains(string(b), "topologyManagerScope") {
		t.Fatalf("drop-in after the failed drain: %q, %v; want the change not written", b, err)
	}
	if _, err := client.CoreV1().Pods(ns).Get(ctx, "blocker", metav1.GetOptions{}); err != nil {
		t.Fatalf("the budget's pod: %v", err)
	}

	// Without the budget, the next drain (tried again after its bound)
	// evicts the pod and the change goes through.
	if err := client.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "blocker", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The next drain starts no sooner than 30 s after the failed one, when
	// the reconciler's backoff asks again.
	waitStatusWithin(ctx, t, 4*time.Minute, "the change promoted once the pod could go", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return nodeview.ResourceVersion(st.LastKnownGood) == scope && c.Reason == "Active"
	})
	if _, err := client.CoreV1().Pods(ns).Get(ctx, "blocker", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the pod after the drain: %v; want it evicted", err)
	}
	waitKubeletSays(ctx, t, "topologyManagerScope", "pod")
	if got := node.Kubelet.Starts() - starts; got != 1 {
		t.Fatalf("%d kubelet starts for the drained change; want exactly 1", got)
	}
	waitUncordoned(ctx, t)
	runReadmeCommand(ctx, t, work, `kubectl patch nodeconfig workers --type json -p '[{"op":"remove","path":"/spec/rollout/drain"}]'`)
}

// watchGoneWhileDown watches path until ctx ends: the flag turns true once
// the file was seen missing while the kubelet was not running (between a
// stop and the next start, where the agent removes it).
func watchGoneWhileDown(ctx context.Context, t *testing.T, path string) *atomic.Bool {
	t.Helper()
	gone := &atomic.Bool{}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for wctx.Err() == nil && !gone.Load() {
			var st syscall.Stat_t
			if err := syscall.Stat(path, &st); err != nil && os.IsNotExist(err) && !node.Kubelet.Running() {
				gone.Store(true)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return gone
}

// waitKubeletSays waits until the running kubelet's /configz says field is want.
func waitKubeletSays(ctx context.Context, t *testing.T, field, want string) {
	t.Helper()
	err := proc.WaitFor(2*time.Minute, func() (bool, error) {
		cfg, err := node.Configz(ctx)
		if err != nil {
			return false, err
		}
		return cfg[field] == want, fmt.Errorf("configz %s %v", field, cfg[field])
	})
	if err != nil {
		t.Fatalf("kubelet %s %s: %v", field, want, err)
	}
}

func nodeUnschedulable(ctx context.Context) (bool, error) {
	n, err := node.Cluster.Client.CoreV1().Nodes().Get(ctx, realnode.NodeName, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	return n.Spec.Unschedulable, nil
}

func waitCordoned(ctx context.Context, t *testing.T) {
	t.Helper()
	if err := proc.WaitFor(time.Minute, func() (bool, error) {
		u, err := nodeUnschedulable(ctx)
		return u, fmt.Errorf("unschedulable %v (%v)", u, err)
	}); err != nil {
		t.Fatalf("the Node was never cordoned for the drain: %v", err)
	}
}

func waitUncordoned(ctx context.Context, t *testing.T) {
	t.Helper()
	if err := proc.WaitFor(time.Minute, func() (bool, error) {
		u, err := nodeUnschedulable(ctx)
		return err == nil && !u, fmt.Errorf("unschedulable %v (%v)", u, err)
	}); err != nil {
		t.Fatalf("the Node is still cordoned: %v", err)
	}
}

func waitPodRunning(ctx context.Context, t *testing.T, ns, name string) {
	t.Helper()
	if err := proc.WaitFor(2*time.Minute, func() (bool, error) {
		p, err := node.Cluster.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.Status.Phase == corev1.PodRunning, fmt.Errorf("pod %s/%s %s", ns, name, p.Status.Phase)
	}); err != nil {
		t.Fatalf("%v\n%s", err, diagnose(ctx))
	}
}

// waitBudgetSeen waits until the disruption controller has judged the
// budget: it allows no disruption.
func waitBudgetSeen(ctx context.Context, t *testing.T, ns, name string) {
	t.Helper()
	if err := proc.WaitFor(time.Minute, func() (bool, error) {
		b, err := node.Cluster.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		st, _ := json.Marshal(b.Status)
		return b.Status.ObservedGeneration == b.Generation && b.Status.CurrentHealthy == 1 && b.Status.DisruptionsAllowed == 0, fmt.Errorf("budget status %s", st)
	}); err != nil {
		t.Fatal(err)
	}
}

// waitStatusWithin is waitStatus with a deadline of its own.
func waitStatusWithin(ctx context.Context, t *testing.T, within time.Duration, what string, check func(corev1.NodeConfigStatus, *corev1.NodeCondition) bool) {
	t.Helper()
	var last string
	err := proc.WaitFor(within, func() (bool, error) {
		st, c, err := nodeview.Read(ctx, node.Cluster.Client, realnode.NodeName)
		if err != nil {
			return false, err
		}
		last = fmt.Sprintf("%+v %s/%s %q", st, c.Status, c.Reason, c.Message)
		return check(st, c), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v (last: %s)\n%s", what, err, last, diagnose(ctx))
	}
	t.Logf("node is %s: %s", what, last)
}
