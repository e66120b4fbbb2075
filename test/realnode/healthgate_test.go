package realnode_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/realnode"
)

// healthGatesRollBack: two configs the kubelet accepts and runs healthy,
// each of which breaks the node, rolled back by the agent's default health
// gate during their soak.
//   - An eviction threshold above the machine's free memory: the Node goes
//     MemoryPressure=True and the kubelet evicts the reconciler's
//     replicas; the agent rolls back with no reconciler needed, the
//     pressure ends, and the Node's condition and an Event say why.
//   - maxPods 1 on a node that runs four pods: the restarted kubelet
//     keeps the agent's, which outranks the others, and ends the
//     reconciler's and statusd's; rolled back by the agent alone, and
//     statusd, started again, tells of it.
func healthGatesRollBack(ctx context.Context, t *testing.T, work string) {
	// A soak long enough that the pressure, seconds after the restart,
	// comes within it.
	runReadmeCommand(ctx, t, work, `kubectl patch nodeconfig workers --type merge -p '{"spec":{"soakSeconds":300}}'`)
	// Above what the machine has free, below its capacity (the kubelet
	// refuses to start on a reservation above that).
	threshold := fmt.Sprintf("%dMi", memTotalMiB(t)-512)
	runReadmeCommand(ctx, t, work, fmt.Sprintf(`printf 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 60\nevictionHard: {memory.available: %s, nodefs.available: 1%%%%, imagefs.available: 1%%%%, nodefs.inodesFree: 1%%%%}\n' > pressure.yaml && kubectl create configmap kubelet-config -n kube-system --from-file=config.yaml=./pressure.yaml --dry-run=client -o yaml | kubectl apply -f -`, threshold))
	waitKubeletEviction(ctx, t, threshold)
	waitStatus(ctx, t, "rolled back by the health gate on memory pressure", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return c.Status == corev1.ConditionFalse && c.Reason == "HealthGateFailed" && strings.Contains(c.Message, "MemoryPressure is True")
	})
	waitKubeletEviction(ctx, t, "50Mi")
	waitNodeCondition(ctx, t, corev1.NodeMemoryPressure, corev1.ConditionFalse)
	waitNodeEvent(ctx, t, "HealthGateFailed", "MemoryPressure is True")
	cleanUpEnded(ctx, t, work)

	runReadmeCommand(ctx, t, work, `printf 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 1\n' > one.yaml && kubectl create configmap kubelet-config -n kube-system --from-file=config.yaml=./one.yaml --dry-run=client -o yaml | kubectl apply -f -`)
	waitStatus(ctx, t, "rolled back by the health gate on rejected pods", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return c.Status == corev1.ConditionFalse && c.Reason == "HealthGateFailed" && strings.Contains(c.Message, "pods Ready before the trial")
	})
	waitKubeletHealthyOn(ctx, t, 60)
	runReadmeCommand(ctx, t, work, `kubectl patch nodeconfig workers --type merge -p '{"spec":{"soakSeconds":10}}'`)
	cleanUpEnded(ctx, t, work)
}

// memTotalMiB is the machine's memory, from the kernel.
func memTotalMiB(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if f := strings.Fields(s.Text()); len(f) == 3 && f[0] == "MemTotal:" {
			kib, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kib / 1024
		}
	}
	t.Fatal("no MemTotal in /proc/meminfo")
	return 0
}

// waitKubeletEviction waits until the running kubelet's memory.available
// eviction threshold is want, as it says itself (/configz).
func waitKubeletEviction(ctx context.Context, t *testing.T, want string) {
	t.Helper()
	err := proc.WaitFor(2*time.Minute, func() (bool, error) {
		cfg, err := node.Configz(ctx)
		if err != nil {
			return false, err
		}
		hard, _ := cfg["evictionHard"].(map[string]any)
		return hard["memory.available"] == want, fmt.Errorf("configz evictionHard %v", cfg["evictionHard"])
	})
	if err != nil {
		t.Fatalf("kubelet memory.available threshold %s: %v", want, err)
	}
}

func waitNodeCondition(ctx context.Context, t *testing.T, typ corev1.NodeConditionType, want corev1.ConditionStatus) {
	t.Helper()
	err := proc.WaitFor(3*time.Minute, func() (bool, error) {
		n, err := node.Cluster.Client.CoreV1().Nodes().Get(ctx, realnode.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == typ {
				return c.Status == want, fmt.Errorf("%s=%s (%s)", typ, c.Status, c.Message)
			}
		}
		return false, fmt.Errorf("no %s condition", typ)
	})
	if err != nil {
		t.Fatalf("the Node's %s never went %s: %v", typ, want, err)
	}
}

// waitNodeEvent waits for an Event on the Node with reason, saying says.
func waitNodeEvent(ctx context.Context, t *testing.T, reason, says string) {
	t.Helper()
	err := proc.WaitFor(2*time.Minute, func() (bool, error) {
		list, err := node.Cluster.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + realnode.NodeName})
		if err != nil {
			return false, err
		}
		var seen []string
		for _, e := range list.Items {
			if e.Reason == reason && strings.Contains(e.Message, says) {
				t.Logf("event on the Node: %s %s: %s", e.Type, e.Reason, e.Message)
				return true, nil
			}
			seen = append(seen, e.Reason)
		}
		return false, fmt.Errorf("events on the Node: %v", seen)
	})
	if err != nil {
		t.Fatalf("no %s event saying %q: %v", reason, says, err)
	}
}

// cleanUpEnded removes the pods the broken configs ended, as an operator
// would, and waits for the install to be whole again.
func cleanUpEnded(ctx context.Context, t *testing.T, work string) {
	t.Helper()
	runReadmeCommand(ctx, t, work, `kubectl delete pods -n nodeconfig-system --field-selector=status.phase=Failed`)
	runReadmeCommand(ctx, t, work, `kubectl delete pods -n nodeconfig-system --field-selector=status.phase=Succeeded`)
	if err := node.WaitNodeReady(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	waitInstallReady(ctx, t)
}
