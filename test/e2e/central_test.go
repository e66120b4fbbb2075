package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/framework/sim"
)

// With central validation (the reconciler's default), a payload that fails
// the NodeConfig's validator is assigned to no node: zero rollbacks, every
// node keeps its config and last-known-good, and the NodeConfig says why
// with its own reason and a Warning event. The fixed payload rolls out.
func TestCentralValidationRefusesBeforeAnyNode(t *testing.T) {
	e := newNodes(t, 2, func(int) sim.NodeOptions { return sim.NodeOptions{} })
	e.startReconciler("r0", "--node-validation-only=false")
	good := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(1), "validator": "yaml", "rollout": map[string]any{"maxInTrial": "100%"}})
	for _, n := range e.nodes {
		e.waitNode(n.Name, 30*time.Second, "promoted", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
			return rv(st.LastKnownGood) == good.ResourceVersion
		})
	}
	before := []string{e.records(0).String(), e.records(1).String()}

	bad := e.configMap("cfg", map[string]string{"config.yaml": "maxPods: [110\n"})
	e.waitNodeConfigCondition(e.label, "Degraded", metav1.ConditionTrue, "ConfigRefused", 20*time.Second)
	e.waitNodeConfigCondition(e.label, "Ready", metav1.ConditionFalse, "ConfigRefused", 20*time.Second)
	ev := e.waitEventNaming("NodeConfig", e.label, "ConfigRefused", "resourceVersion "+bad.ResourceVersion+" ", 10*time.Second)
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "invalid YAML") {
		t.Fatalf("event %s %q; want a Warning naming the version and the validator's words", ev.Type, ev.Message)
	}
	// Once every node synced after the refusal, the nodes' own stores hold
	// no checkpoint of it and their records did not move: nothing
	// assigned, nothing rolled back.
	e.nothingReached(bad, before, goodYAML)

	fixed := e.configMap("cfg", map[string]string{"config.yaml": "maxPods: 111\n"})
	for _, n := range e.nodes {
		e.waitNode(n.Name, 30*time.Second, "fixed version promoted", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
			return rv(st.LastKnownGood) == fixed.ResourceVersion
		})
	}
	e.waitNodeConfigCondition(e.label, "Ready", metav1.ConditionTrue, "AllNodesActive", 20*time.Second)
}

// The kubelet validator runs in a child process of the reconciler
// (nodeconfig-kubelet-check): its refusal reads as the kubelet's code in
// process reads ("invalid KubeletConfiguration: ..."). When it cannot run,
// the new version is held, not refused and not assigned: the NodeConfig
// says ValidationUnavailable naming the binary (no Node gets a Warning of
// its own), the nodes keep their config, and once the binary runs again
// the version rolls out.
func TestCentralKubeletValidationRunsInAChildProcess(t *testing.T) {
	real, err := proc.Binary("nodeconfig-kubelet-check")
	if err != nil {
		t.Fatal(err)
	}
	// A stand-in that runs the real binary while the file "works" exists,
	// and otherwise dies as a crashed validator would.
	dir := t.TempDir()
	works := filepath.Join(dir, "works")
	check := filepath.Join(dir, "nodeconfig-kubelet-check")
	script := fmt.Sprintf("#!/bin/sh\n[ -e %q ] && exec %q\necho 'fatal error: out of memory' >&2\nexit 3\n", works, real)
	if err := os.WriteFile(check, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(works, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	e := newNodes(t, 2, func(int) sim.NodeOptions { return sim.NodeOptions{} })
	e.startReconciler("r0", "--node-validation-only=false", "--kubelet-check-binary", check)
	const base = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	good := e.configMap("cfg", map[string]string{"config.yaml": base + "maxPods: 110\n"})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(1), "validator": "kubelet", "rollout": map[string]any{"maxInTrial": "100%"}})
	for _, n := range e.nodes {
		e.waitNode(n.Name, 30*time.Second, "promoted", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
			return rv(st.LastKnownGood) == good.ResourceVersion
		})
	}
	before := []string{e.records(0).String(), e.records(1).String()}
	unchanged := func(what string) {
		t.Helper()
		for i, n := range e.nodes {
			if after := e.records(i).String(); after != before[i] {
				t.Fatalf("node %s records changed for %s:\nbefore %s\nafter  %s", n.Name, what, before[i], after)
			}
		}
	}

	// degraded waits for the NodeConfig's Degraded condition with reason.
	degraded := func(reason string) *metav1.Condition {
		t.Helper()
		nc := e.waitNodeConfig(e.label, 20*time.Second, "Degraded=True/"+reason, func(nc *v1alpha1.NodeConfig) bool {
			c := meta.FindStatusCondition(nc.Status.Conditions, "Degraded")
			return c != nil && c.Status == metav1.ConditionTrue && c.Reason == reason
		})
		return meta.FindStatusCondition(nc.Status.Conditions, "Degraded")
	}

	bad := e.configMap("cfg", map[string]string{"config.yaml": base + "hairpinMode: bogus\n"})
	c := degraded("ConfigRefused")
	want := `invalid KubeletConfiguration: invalid configuration: option "bogus" specified for hairpinMode`
	if !strings.Contains(c.Message, want) || !strings.Contains(c.Message, bad.ResourceVersion) {
		t.Fatalf("Degraded message %q, want the version and %q", c.Message, want)
	}
	unchanged("a refused version")

	// The validator crashes from now on: the next version has no verdict.
	if err := os.Remove(works); err != nil {
		t.Fatal(err)
	}
	next := e.configMap("cfg", map[string]string{"config.yaml": base + "maxPods: 57\n"})
	c = degraded("ValidationUnavailable")
	for _, w := range []string{next.ResourceVersion, check, "exit status 3: fatal error: out of memory"} {
		if !strings.Contains(c.Message, w) {
			t.Fatalf("Degraded message %q, want it to name %q", c.Message, w)
		}
	}
	e.waitNodeConfigCondition(e.label, "Ready", metav1.ConditionFalse, "ValidationUnavailable", 10*time.Second)
	if ev := e.waitEventNaming("NodeConfig", e.label, "ValidationUnavailable", "resourceVersion "+next.ResourceVersion+" ", 10*time.Second); ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, check) {
		t.Fatalf("event %s %q; want a Warning naming the binary", ev.Type, ev.Message)
	}
	unchanged("a version the validator could not judge")
	// The nodes retry with backoff, each failing with the reason.
	for _, n := range e.nodes {
		var st *nodeconfigv1.NodeState
		if err := proc.WaitFor(10*time.Second, func() (bool, error) {
			st = e.nodeState(n.Name)
			return strings.Contains(st.GetError(), check) && st.GetFailures() > 0, nil
		}); err != nil {
			t.Fatalf("node %s: reconciler error %q (%d failures), want it to name %s: %v", n.Name, st.GetError(), st.GetFailures(), check, err)
		}
	}
	// Said once on the NodeConfig, not once per node: a fleet of thousands
	// would get thousands of Events for one missing binary.
	for _, n := range e.nodes {
		for _, ev := range e.events(t, "Node", n.Name, "UpdateFailed") {
			if strings.Contains(ev.Message, check) {
				t.Fatalf("node %s got its own Warning for the NodeConfig's validator: %q", n.Name, ev.Message)
			}
		}
	}

	// The validator runs again: the version that waited rolls out.
	if err := os.WriteFile(works, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range e.nodes {
		e.waitNode(n.Name, 30*time.Second, "the held version promoted", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
			return rv(st.LastKnownGood) == next.ResourceVersion
		})
	}
	e.waitNodeConfigCondition(e.label, "Ready", metav1.ConditionTrue, "AllNodesActive", 20*time.Second)
}
