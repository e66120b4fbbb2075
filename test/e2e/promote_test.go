package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeconfig.io/test/proc"
)

// A config that stays active through its soak becomes last-known-good on
// the node's own records even when its ConfigMap is deleted during the
// soak, as the kubelet did: the condition's "on trial until" comes true,
// and a later bad version rolls back to it, not to the one before.
func TestActiveConfigIsPromotedAfterItsConfigMapIsDeleted(t *testing.T) {
	const soak = 2 * time.Second
	e := newEnv(t, 1)
	n := e.nodes[0]
	v1 := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(soak / time.Second)})
	e.waitNode(n.Name, 20*time.Second, "v1 promoted", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.LastKnownGood) == v1.ResourceVersion && reasonIs(c, "Active")
	})
	v2 := e.configMap("cfg", map[string]string{"config.yaml": "maxPods: 90\n"})
	e.waitNode(n.Name, 20*time.Second, "v2 soaking", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.Active) == v2.ResourceVersion && reasonIs(c, "Soaking")
	})
	if err := e.c.Client.CoreV1().ConfigMaps(e.ns).Delete(e.ctx, "cfg", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := proc.WaitFor(20*time.Second, func() (bool, error) {
		return e.records(0).GetLastKnownGood().GetSource().GetResourceVersion() == v2.ResourceVersion, nil
	}); err != nil {
		t.Fatalf("v2 stayed active through its soak but was never promoted: %v (records %v)", err, e.records(0))
	}
	r := e.records(0)
	if promoted, soakEnd := r.GetLastKnownGood().GetWrittenAt().AsTime(), r.GetActive().GetWrittenAt().AsTime().Add(soak); promoted.Before(soakEnd) {
		t.Fatalf("promoted at %v, before the soak ended at %v", promoted, soakEnd)
	}
	e.waitNode(n.Name, 20*time.Second, "the missing ConfigMap reported, v2 in use", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.LastKnownGood) == v2.ResourceVersion && reasonIs(c, "DownloadFailed") && strings.Contains(c.Message, "resourceVersion "+v2.ResourceVersion)
	})

	// The ConfigMap comes back bad: the rollback goes to v2.
	bad := e.configMap("cfg", map[string]string{"config.yaml": badYAML})
	e.waitNode(n.Name, 20*time.Second, "rolled back to v2", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.Assigned) == bad.ResourceVersion && rv(st.Active) == v2.ResourceVersion && reasonIs(c, "RolledBack")
	})
	if got, _ := n.Target(); got != "maxPods: 90\n" {
		t.Fatalf("target = %q, want v2's", got)
	}
}
