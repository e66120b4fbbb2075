package e2e

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/test/framework/proc"
)

// Pausing mid-rollout starts no new trial while the node already soaking
// finishes and promotes; resuming continues the rollout to every node.
func TestPausedRolloutStartsNoTrialAndResumeContinues(t *testing.T) {
	e := newEnv(t, 3)
	v1 := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	rollout := map[string]any{"maxInTrial": int64(1)}
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(1), "rollout": rollout})
	for _, n := range e.nodes {
		e.waitNode(n.Name, 30*time.Second, "v1 promoted", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
			return rv(st.LastKnownGood) == v1.ResourceVersion
		})
	}

	// A new version with a long soak: the first node takes it and soaks.
	v2 := e.configMap("cfg", map[string]string{"config.yaml": "maxPods: 21\n"})
	e.setSpec(map[string]any{"soakSeconds": int64(4), "rollout": rollout})
	first := -1
	if err := proc.WaitFor(20*time.Second, func() (bool, error) {
		for i := range e.nodes {
			if e.records(i).GetActive().GetSource().GetResourceVersion() == v2.ResourceVersion {
				first = i
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("no node started the v2 trial: %v", err)
	}
	e.setSpec(map[string]any{"soakSeconds": int64(4), "rollout": map[string]any{"maxInTrial": int64(1), "paused": true}})

	// The soaking node finishes (its own records say so), and the
	// NodeConfig, synced at the paused generation, says it is paused.
	e.waitNode(e.nodes[first].Name, 20*time.Second, "v2 promoted while paused", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
		return rv(st.LastKnownGood) == v2.ResourceVersion
	})
	e.waitHeld(e.label, "Paused", 20*time.Second)
	// Once each of the others synced again, none holds v2 in its store (it
	// was never sent), its records changed nothing since every node was
	// synced at the paused generation, and its file is v1's.
	before := make([]string, len(e.nodes))
	for i := range e.nodes {
		before[i] = e.records(i).String()
	}
	var others []int
	for i := range e.nodes {
		if i != first {
			others = append(others, i)
		}
	}
	e.nothingReachedOn(others, v2, before, goodYAML)

	e.setSpec(map[string]any{"soakSeconds": int64(1), "rollout": map[string]any{"maxInTrial": int64(1), "paused": false}})
	for _, n := range e.nodes {
		e.waitNode(n.Name, 30*time.Second, "v2 promoted after resume", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
			return rv(st.LastKnownGood) == v2.ResourceVersion
		})
	}
}

// Outside every maintenance window no node starts a trial (its file and
// records stay as they were) and the status says when the next window
// opens; a window that includes now lets the rollout through.
func TestOutsideMaintenanceWindowNothingRestarts(t *testing.T) {
	e := newEnv(t, 2)
	v1 := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(1), "rollout": map[string]any{"maxInTrial": "100%"}})
	for _, n := range e.nodes {
		e.waitNode(n.Name, 30*time.Second, "v1 promoted", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
			return rv(st.LastKnownGood) == v1.ResourceVersion
		})
	}
	before := []string{e.records(0).String(), e.records(1).String()}

	// A daily window that opened 4 hours ago and closed 2 hours ago (UTC):
	// it opens next in 20 hours.
	now := time.Now().UTC()
	hhmm := func(t time.Time) string { return fmt.Sprintf("%02d:%02d", t.Hour(), t.Minute()) }
	closed := []any{map[string]any{"start": hhmm(now.Add(-4 * time.Hour)), "end": hhmm(now.Add(-2 * time.Hour)), "timeZone": "UTC"}}
	e.setSpec(map[string]any{"soakSeconds": int64(1), "rollout": map[string]any{"maxInTrial": "100%", "windows": closed}})
	v2 := e.configMap("cfg", map[string]string{"config.yaml": "maxPods: 22\n"})
	st := e.waitHeld(e.label, "OutsideMaintenanceWindow", 20*time.Second)
	if st.NextWindow == nil {
		t.Fatalf("status.nextWindow is not set: %+v", st)
	}
	opens := st.NextWindow.Time
	if want := now.Add(20 * time.Hour).Truncate(time.Minute); opens.Sub(want).Abs() > 2*time.Minute {
		t.Fatalf("status.nextWindow %v, want about %v", opens, want)
	}
	// Once every node synced after the change, none holds v2 in its store,
	// its records or its file.
	e.nothingReached(v2, before, goodYAML)

	open := []any{map[string]any{"start": hhmm(now.Add(-time.Hour)), "end": hhmm(now.Add(2 * time.Hour)), "timeZone": "UTC"}}
	e.setSpec(map[string]any{"soakSeconds": int64(1), "rollout": map[string]any{"maxInTrial": "100%", "windows": open}})
	for _, n := range e.nodes {
		e.waitNode(n.Name, 30*time.Second, "v2 active inside the window", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
			return rv(st.Active) == v2.ResourceVersion
		})
	}
}

// setSpec replaces the test NodeConfig's spec (source "cfg", the test's
// nodes) with extra on top, retrying on the reconciler's status writes.
func (e *env) setSpec(extra map[string]any) {
	e.t.Helper()
	spec := map[string]any{
		"nodeSelector": map[string]any{"matchLabels": map[string]any{"e2e": e.label}},
		"source":       map[string]any{"configMap": map[string]any{"namespace": e.ns, "name": "cfg", "key": "config.yaml"}},
	}
	for k, v := range extra {
		spec[k] = v
	}
	if err := e.tryNodeConfig(e.label, spec); err != nil {
		e.t.Fatal(err)
	}
}

// waitHeld waits until the NodeConfig's status, computed at its current
// generation, says no trial starts for reason, and returns the status.
func (e *env) waitHeld(name, reason string, timeout time.Duration) v1alpha1.NodeConfigStatus {
	e.t.Helper()
	nc := e.waitNodeConfig(name, timeout, "held for "+reason+" at its generation", func(nc *v1alpha1.NodeConfig) bool {
		c := meta.FindStatusCondition(nc.Status.Conditions, v1alpha1.ConditionProgressing)
		return nc.Status.ObservedGeneration == nc.Generation && c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason
	})
	return nc.Status
}
