package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/test/framework/sim"
)

const kubeletHeader = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

// A node that rolls back on its own mid-soak (here: its base config changed
// so that the kubelet would refuse the drop-in on trial at its next start)
// is seen by the reconciler at once, long before the soak would end: the
// NodeConfig counts it rolled back and its Event is recorded.
func TestANodesOwnRollbackMidSoakIsSeenAtOnce(t *testing.T) {
	e := newNodes(t, 1, func(int) sim.NodeOptions {
		return sim.NodeOptions{
			KubeletConfig:   kubeletHeader + "failCgroupV1: false\n",
			CheckpointdArgs: []string{"--kubelet-files-period", "200ms"},
		}
	})
	e.startReconciler("r0")
	node := e.nodes[0]
	trial := e.configMap("cfg", map[string]string{"config.yaml": kubeletHeader + "imageGCHighThresholdPercent: 90\n"})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(600), "validator": "kubelet"})
	e.waitNode(node.Name, 30*time.Second, "soaking the trial", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.Active) == trial.ResourceVersion && reasonIs(c, v1alpha1.NodeReasonSoaking)
	})
	// The node's owner raises the image GC low threshold above the trial's
	// high one.
	base := filepath.Join(node.Dir, "kubelet-config.yaml")
	if err := os.WriteFile(base, []byte(kubeletHeader+"failCgroupV1: false\nimageGCLowThresholdPercent: 92\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Ten minutes of soak left: anything seen within 30 s was seen at once.
	e.waitNodeConfig(e.label, 30*time.Second, "the node counted rolled back", func(nc *v1alpha1.NodeConfig) bool {
		return nc.Status.RolledBack == 1 && nc.Status.Soaking == 0
	})
	e.waitEvent("Node", node.Name, v1alpha1.EventConfigRolledBack, 10*time.Second)
	if got, ok := node.Target(); ok {
		t.Fatalf("target %q; want the local default (no last-known-good yet)", got)
	}
}
