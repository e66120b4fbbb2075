package realnode_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeconfig.io/test/framework/nodeview"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/realnode"
)

// restartOnlyWhenNeeded: a version is its bytes. An edit of another key of
// the ConfigMap, a label on it, and the key reformatted (keys reordered, a
// comment) each leave the kubelet's process as it was and start no trial
// (the node's assigned record is unchanged once the NodeConfig says it saw
// the edit); a real change restarts the kubelet exactly once.
func restartOnlyWhenNeeded(ctx context.Context, t *testing.T, work string) {
	// Validator kubelet: what the kubelet reads is compared as a document.
	runReadmeCommand(ctx, t, work, `kubectl patch nodeconfig workers --type merge -p '{"spec":{"validator":"kubelet"}}'`)
	kept := applyMaxPods(ctx, t, work, 64)
	waitStatus(ctx, t, "maxPods 64 promoted", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return nodeview.ResourceVersion(st.LastKnownGood) == kept && c.Reason == "Active"
	})
	waitKubeletHealthyOn(ctx, t, 64)
	pid, starts := node.Kubelet.Pid(), node.Kubelet.Starts()

	apply := func(files string) string {
		runReadmeCommand(ctx, t, work, `kubectl create configmap kubelet-config -n kube-system `+files+` --dry-run=client -o yaml | kubectl apply -f -`)
		return configMapVersion(ctx, t)
	}
	for what, edit := range map[string]func() string{
		"another key": func() string { return apply(`--from-file=config.yaml=./max.yaml --from-literal=notes=ticket-42`) },
		"a label": func() string {
			runReadmeCommand(ctx, t, work, `kubectl label configmap kubelet-config -n kube-system team=nodes`)
			return configMapVersion(ctx, t)
		},
		"the key reformatted": func() string {
			runReadmeCommand(ctx, t, work, `printf '# the same, reformatted\nmaxPods: 64\nkind: KubeletConfiguration\napiVersion: kubelet.config.k8s.io/v1beta1\n' > same.yaml`)
			return apply(`--from-file=config.yaml=./same.yaml`)
		},
	} {
		rv := edit()
		waitNodeConfigSays(ctx, t, fmt.Sprintf("changed (resourceVersion %s) but not key config.yaml", rv))
		st, _, err := nodeview.Read(ctx, node.Cluster.Client, realnode.NodeName)
		if err != nil {
			t.Fatal(err)
		}
		if nodeview.ResourceVersion(st.Assigned) != kept || node.Kubelet.Pid() != pid || node.Kubelet.Starts() != starts {
			t.Fatalf("after %s: assigned %s (want %s kept), kubelet pid %d (was %d), %d starts (was %d)",
				what, nodeview.ResourceVersion(st.Assigned), kept, node.Kubelet.Pid(), pid, node.Kubelet.Starts(), starts)
		}
	}
	next := applyMaxPods(ctx, t, work, 65)
	waitStatus(ctx, t, "maxPods 65 promoted", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return nodeview.ResourceVersion(st.LastKnownGood) == next && c.Reason == "Active"
	})
	waitKubeletHealthyOn(ctx, t, 65)
	if got := node.Kubelet.Starts() - starts; got != 1 {
		t.Fatalf("%d kubelet starts for one real change; want exactly 1", got)
	}
}

func configMapVersion(ctx context.Context, t *testing.T) string {
	t.Helper()
	cm, err := node.Cluster.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubelet-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm.ResourceVersion
}

// waitNodeConfigSays waits until the NodeConfig's Progressing condition
// says says: the reconciler has seen what the test changed.
func waitNodeConfigSays(ctx context.Context, t *testing.T, says string) {
	t.Helper()
	err := proc.WaitFor(time.Minute, func() (bool, error) {
		out, err := node.Shell(ctx, t.TempDir(), `kubectl get nodeconfig workers -o jsonpath='{.status.conditions[?(@.type=="Progressing")].message}'`)
		return err == nil && strings.Contains(string(out), says), fmt.Errorf("Progressing %q (%v)", out, err)
	})
	if err != nil {
		t.Fatalf("the NodeConfig never said %q: %v", says, err)
	}
}
