package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/framework/readonlymount"
)

// An activation that fails to write the file (a read-only target
// directory) is an early error the user sees — error set, a reason, a
// Warning event — with nothing rolled back; once it activates, the soak
// runs from that moment, not from the assignment long before.
func TestActivationFailureIsAnEarlyErrorAndTheSoakStartsAtActivation(t *testing.T) {
	const soak = 2 * time.Second
	e, n, v1 := newPromotedNode(t, soak)

	undo := readonlymount.Mount(t, n.TargetDir)
	v2 := e.configMap("cfg", map[string]string{"config.yaml": "maxPods: 90\n"})
	e.waitNode(n.Name, 20*time.Second, "the failed activation reported", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.Assigned) == v2.ResourceVersion && rv(st.Active) == v1.ResourceVersion && rv(st.LastKnownGood) == v1.ResourceVersion &&
			strings.Contains(st.Error, "read-only file system") && c.Status == corev1.ConditionFalse && c.Reason == "WriteFailed"
	})
	e.waitEvent("Node", n.Name, "UpdateFailed", 10*time.Second)
	if got, _ := n.Target(); got != goodYAML {
		t.Fatalf("target = %q while the directory is read-only, want v1's", got)
	}
	// Fail for longer than the soak, so a soak counted from the assignment
	// would be over the moment the config activates.
	assignedAt := e.records(0).GetAssigned().GetWrittenAt().AsTime()
	if err := proc.WaitFor(30*time.Second, func() (bool, error) {
		r := e.records(0)
		return r.GetError().GetError().GetPhase() == nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY && time.Since(assignedAt) > 2*soak, nil
	}); err != nil {
		t.Fatalf("the early error did not last: %v (records %v)", err, e.records(0))
	}
	undo()

	e.waitNode(n.Name, 30*time.Second, "v2 promoted", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.LastKnownGood) == v2.ResourceVersion && reasonIs(c, "Active") && st.Error == ""
	})
	r := e.records(0)
	activeAt, promotedAt := r.GetActive().GetWrittenAt().AsTime(), r.GetLastKnownGood().GetWrittenAt().AsTime()
	if !activeAt.After(assignedAt.Add(2 * soak)) {
		t.Fatalf("active at %v, only %v after the assignment; the directory was read-only that long", activeAt, activeAt.Sub(assignedAt))
	}
	if promotedAt.Before(activeAt.Add(soak)) {
		t.Fatalf("promoted %v after it became active; the soak is %v", promotedAt.Sub(activeAt), soak)
	}
	if got, _ := n.Target(); got != "maxPods: 90\n" {
		t.Fatalf("target = %q, want v2's", got)
	}
}
