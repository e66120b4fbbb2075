package why

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/report"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.Local)

const (
	v10 = `{"configMap": {"namespace": "ns", "name": "cm", "uid": "u", "resourceVersion": "10", "kubeletConfigKey": "config.yaml"}}`
	v12 = `{"configMap": {"namespace": "ns", "name": "cm", "uid": "u", "resourceVersion": "12", "kubeletConfigKey": "config.yaml"}}`
)

func cond(t, s, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: t, Status: metav1.ConditionStatus(s), Reason: reason, Message: msg}
}

func demo(conds ...metav1.Condition) v1alpha1.NodeConfig {
	return v1alpha1.NodeConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "demo"},
		Spec: v1alpha1.NodeConfigSpec{
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}},
			Source:       &v1alpha1.Source{ConfigMap: &v1alpha1.ConfigMapSource{Namespace: "ns", Name: "cm", Key: "config.yaml"}},
			Validator:    "kubelet",
		},
		Status: v1alpha1.NodeConfigStatus{Conditions: conds},
	}
}

func testNode(annotation, reason, status string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0", Labels: map[string]string{"pool": "a"}}}
	if annotation != "" {
		n.Annotations = map[string]string{v1alpha1.NodeAnnotationConfigStatus: annotation}
	}
	if reason != "" {
		n.Status.Conditions = []corev1.NodeCondition{{Type: v1alpha1.NodeConditionConfigReady, Status: corev1.ConditionStatus(status), Reason: reason,
			Message: "the node's message.", LastTransitionTime: metav1.NewTime(now.Add(-2 * time.Minute))}}
	}
	return n
}

func reachable() report.Reconciler { return report.Reconciler{Reachable: true, Via: "127.0.0.1:7603"} }

func state(s nodeconfigv1.LifecycleState) *nodeconfigv1.NodeState {
	return &nodeconfigv1.NodeState{NodeName: "node-0", NodeConfig: "demo", State: s}
}

func text(e Explanation) string { return strings.Join(e.Sentences, "\n") }

func mustContain(t *testing.T, e Explanation, wants ...string) {
	t.Helper()
	got := text(e)
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("missing %q in:\n%s", w, got)
		}
	}
}

func mustNotContain(t *testing.T, e Explanation, nots ...string) {
	t.Helper()
	got := text(e)
	for _, w := range nots {
		if strings.Contains(got, w) {
			t.Errorf("unexpected %q in:\n%s", w, got)
		}
	}
}

func TestActiveNode(t *testing.T) {
	nc := demo(cond("Ready", "True", "AllNodesActive", "all 2 selected node(s) have this config active and last-known-good"),
		cond("Progressing", "False", "RolloutComplete", "all 2 selected node(s) use this config"), cond("Degraded", "False", "AsExpected", "no node rolled back or failing"))
	st := state(nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ACTIVE)
	st.NextReconcileTime = timestamppb.New(now.Add(9 * time.Minute))
	e := Explain(Input{Node: testNode(`{"assigned": `+v10+`, "active": `+v10+`, "lastKnownGood": `+v10+`}`, "Active", "True"),
		NodeConfigs: []v1alpha1.NodeConfig{nc}, Reconciler: reachable(), State: st, Now: now})
	mustContain(t, e,
		"node-0 is selected by NodeConfig demo (nodeSelector pool=a), which wants ConfigMap ns/cm key config.yaml (validator kubelet).",
		"Its NodeConfigReady condition is True with reason Active since 11:58:00 (2m0s ago): the assigned config is active and last-known-good.",
		"The node says: the node's message.",
		"It has ConfigMap ns/cm key config.yaml at resourceVersion 10 assigned, active and last-known-good.",
		"The reconciler sees it as ACTIVE (its assigned config is active and last-known-good).",
		"It is reconciled next at 12:09:00 (in 9m0s).",
		"NodeConfig demo is Ready (AllNodesActive): all 2 selected node(s) have this config active and last-known-good.",
		"There are no Warning events about node-0")
	mustNotContain(t, e, "paused", "halted", "not reachable", "Its error")
	if e.NodeConfig == nil || e.NodeConfig.Name != "demo" || e.ReconcilerNode == nil || e.ReconcilerNode.State != "ACTIVE" {
		t.Fatalf("structured fields: %+v %+v", e.NodeConfig, e.ReconcilerNode)
	}
}

func TestPausedExplainsTheWait(t *testing.T) {
	nc := demo(cond("Ready", "False", "Paused", "1 soaking, 1 waiting (maxInTrial 1), 0 active of 2 selected; spec.rollout.paused holds new trials"),
		cond("Progressing", "False", "Paused", "1 soaking, 1 waiting (maxInTrial 1), 0 active of 2 selected; spec.rollout.paused holds new trials"),
		cond("Degraded", "False", "AsExpected", "no node rolled back or failing"))
	nc.Spec.Rollout.Paused = true
	e := Explain(Input{Node: testNode(`{"assigned": `+v10+`, "active": `+v10+`, "lastKnownGood": `+v10+`}`, "Active", "True"),
		NodeConfigs: []v1alpha1.NodeConfig{nc}, Reconciler: reachable(), State: state(nodeconfigv1.LifecycleState_LIFECYCLE_STATE_WAITING), Now: now})
	mustContain(t, e,
		"The reconciler sees it as WAITING (selected, but the rollout's pacing holds it back).",
		"NodeConfig demo is paused (spec.rollout.paused): no new trial starts, and nodes soaking finish their soak and promote; that is why this node waits. `kubectl nodeconfig resume demo` resumes it.")
	if !e.NodeConfig.Paused {
		t.Error("nodeConfig.paused is false")
	}

	// A node soaking under a pause finishes: it is not told it waits.
	st := state(nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING)
	st.SoakEndsTime = timestamppb.New(now.Add(25 * time.Second))
	e = Explain(Input{Node: testNode(`{"assigned": `+v12+`, "active": `+v12+`, "lastKnownGood": `+v10+`}`, "Soaking", "True"),
		NodeConfigs: []v1alpha1.NodeConfig{nc}, Reconciler: reachable(), State: st, Now: now})
	mustContain(t, e, "nodes soaking finish their soak and promote. `kubectl nodeconfig resume demo`",
		"Its trial ends at 12:00:25 (in 25s); its config then becomes last-known-good.",
		"Of ConfigMap ns/cm key config.yaml, it has resourceVersion 12 assigned, 12 active and 10 as last-known-good.")
	mustNotContain(t, e, "that is why this node waits")

	// Versions of two ConfigMaps, and the local default, are each named.
	other := `{"configMap": {"namespace": "ns", "name": "old", "uid": "u0", "resourceVersion": "3", "kubeletConfigKey": "config.yaml"}}`
	e = Explain(Input{Node: testNode(`{"assigned": `+v12+`, "active": `+other+`}`, "Activating", "Unknown"), NodeConfigs: []v1alpha1.NodeConfig{nc}, Now: now})
	mustContain(t, e, "It has ConfigMap ns/cm key config.yaml at resourceVersion 12 assigned, ConfigMap ns/old key config.yaml at resourceVersion 3 active and the local default as last-known-good.")
	e = Explain(Input{Node: testNode(`{"assigned": `+v12+`}`, "Activating", "Unknown"), NodeConfigs: []v1alpha1.NodeConfig{nc}, Now: now})
	mustContain(t, e, "Of ConfigMap ns/cm key config.yaml, it has resourceVersion 12 assigned, the local default active and the local default as last-known-good.")

	// Resumed but not yet observed.
	nc.Spec.Rollout.Paused = false
	e = Explain(Input{Node: testNode("", "", ""), NodeConfigs: []v1alpha1.NodeConfig{nc}, Reconciler: reachable(), State: state(nodeconfigv1.LifecycleState_LIFECYCLE_STATE_WAITING), Now: now})
	mustContain(t, e, "NodeConfig demo is resumed, but its status still says Paused")
}

func TestOutsideMaintenanceWindowSaysWhenTheNextOpens(t *testing.T) {
	nc := demo(cond("Ready", "False", "OutsideMaintenanceWindow", "0 soaking, 2 waiting"),
		cond("Progressing", "False", "OutsideMaintenanceWindow", "0 soaking, 2 waiting; no maintenance window is open"),
		cond("Degraded", "False", "AsExpected", ""))
	next := metav1.NewTime(now.Add(10 * time.Hour))
	nc.Status.NextWindow = &next
	e := Explain(Input{Node: testNode(`{}`, "LocalDefault", "True"), NodeConfigs: []v1alpha1.NodeConfig{nc},
		Reconciler: reachable(), State: state(nodeconfigv1.LifecycleState_LIFECYCLE_STATE_WAITING), Now: now})
	mustContain(t, e, "No maintenance window of NodeConfig demo is open: no trial starts and no drift repair restarts the kubelet; the next window opens at 22:00:00 (in 10h0m0s); that is why this node waits.",
		"It has the local default assigned, active and last-known-good.")
	if e.NodeConfig.NextWindow == nil || !e.NodeConfig.NextWindow.Equal(next.Time) {
		t.Errorf("nodeConfig.nextWindow = %v", e.NodeConfig.NextWindow)
	}

	nc = demo(cond("Progressing", "False", "InvalidMaintenanceWindow", "window 0: start \"25:00\" is not HH:MM"))
	e = Explain(Input{Node: testNode("", "", ""), NodeConfigs: []v1alpha1.NodeConfig{nc}, Reconciler: reachable(), Now: now})
	mustContain(t, e, `A maintenance window of NodeConfig demo does not parse: window 0: start "25:00" is not HH:MM; no trial starts until it is fixed.`)
}

func TestHaltedNamesTheVersionAndTheNodes(t *testing.T) {
	msg := "2 node(s) rolled back from resourceVersion 12 of ConfigMap ns/cm key config.yaml with validator kubelet (maxFailures 2): its rollout is halted until the ConfigMap, the key or the validator changes"
	nc := demo(cond("Ready", "False", "RollingOut", "x"), cond("Progressing", "False", "RollingOut", "x"), cond("Degraded", "True", "RolloutHalted", msg))
	nc.Status.RolledBackVersions = []v1alpha1.RolledBackVersion{{UID: "u", ResourceVersion: "12", Key: "config.yaml", Validator: "kubelet", Nodes: []string{"node-0", "node-3"}}}
	e := Explain(Input{Node: testNode(`{"assigned": `+v12+`, "active": `+v10+`, "lastKnownGood": `+v10+`, "error": "failed to validate: strict decoding error"}`, "RolledBack", "False"),
		NodeConfigs: []v1alpha1.NodeConfig{nc}, Reconciler: reachable(), State: state(nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ROLLED_BACK), Now: now})
	mustContain(t, e,
		"Its NodeConfigReady condition is False with reason RolledBack since",
		"Its error: failed to validate: strict decoding error.",
		"The rollout of NodeConfig demo is halted: "+msg+".",
		"Of NodeConfig demo, resourceVersion 12 (key config.yaml, validator kubelet) rolled back on node-0, node-3, this node among them.")
	mustNotContain(t, e, "this node stays on its config")

	e = Explain(Input{Node: testNode(`{"assigned": `+v10+`, "active": `+v10+`, "lastKnownGood": `+v10+`}`, "Active", "True"),
		NodeConfigs: []v1alpha1.NodeConfig{nc}, Reconciler: reachable(), State: state(nodeconfigv1.LifecycleState_LIFECYCLE_STATE_HALTED), Now: now})
	mustContain(t, e, "(its NodeConfig's rollout is halted by maxFailures)", "; this node stays on its config until then.")
	if got := e.NodeConfig.RolledBackVersions; len(got) != 1 || got[0].ResourceVersion != "12" {
		t.Errorf("rolledBackVersions = %+v", got)
	}
}

func TestConfigRefused(t *testing.T) {
	msg := "resourceVersion 14 of ConfigMap ns/cm key config.yaml fails validator kubelet: strict decoding error: unknown field \"maxPodz\"; it is assigned to no node, and every node keeps its config"
	nc := demo(cond("Ready", "False", "ConfigRefused", msg), cond("Progressing", "False", "ConfigRefused", msg), cond("Degraded", "True", "ConfigRefused", msg))
	e := Explain(Input{Node: testNode(`{"assigned": `+v10+`, "active": `+v10+`, "lastKnownGood": `+v10+`}`, "Active", "True"),
		NodeConfigs: []v1alpha1.NodeConfig{nc}, Reconciler: reachable(), State: state(nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ACTIVE), Now: now})
	mustContain(t, e, "The reconciler refuses the current config of NodeConfig demo before any node gets it: "+msg+". This node keeps its config until the ConfigMap is fixed.")
}

func TestValidationUnavailable(t *testing.T) {
	msg := "validator kubelet could not run (/nodeconfig-kubelet-check: no such file or directory)"
	nc := demo(cond("Progressing", "False", "ValidationUnavailable", msg), cond("Degraded", "True", "ValidationUnavailable", msg))
	e := Explain(Input{Node: testNode(`{"assigned": `+v10+`, "active": `+v10+`, "lastKnownGood": `+v10+`}`, "Active", "True"),
		NodeConfigs: []v1alpha1.NodeConfig{nc}, Reconciler: reachable(), State: state(nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ACTIVE), Now: now})
	mustContain(t, e, "The reconciler cannot run the validator of NodeConfig demo, so its current config waits and no node gets it: "+msg+". This node keeps its config; the reconciler tries again by itself.")
}

func TestOtherDegradedReasonsAreSaid(t *testing.T) {
	nc := demo(cond("Degraded", "True", "NodesFailing", "1 node(s) rolled back, 0 failing with retries"))
	e := Explain(Input{Node: testNode("", "", ""), NodeConfigs: []v1alpha1.NodeConfig{nc}, Reconciler: reachable(), Now: now})
	mustContain(t, e, "NodeConfig demo is Degraded (NodesFailing): 1 node(s) rolled back, 0 failing with retries.")
}

func TestFailingSyncWithBackoff(t *testing.T) {
	st := state(nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING)
	st.Error, st.Failures, st.Backoff = "checkpointd at 10.0.0.4:7601: connection refused", 3, durationpb.New(8*time.Second)
	st.NextReconcileTime = timestamppb.New(now.Add(8 * time.Second))
	e := Explain(Input{Node: testNode("", "CheckpointdUnavailable", "Unknown"), NodeConfigs: []v1alpha1.NodeConfig{demo()}, Reconciler: reachable(), State: st, Now: now})
	mustContain(t, e,
		"statusd cannot reach checkpointd",
		"It has no nodeconfig.io/config-status annotation yet.",
		"The reconciler sees it as FAILING (an early error, retried with backoff).",
		"Its last sync failed (3 in a row): checkpointd at 10.0.0.4:7601: connection refused; it is retried after a backoff of 8s.",
		"It is reconciled next at 12:00:08 (in 8s).",
		"NodeConfig demo has no status yet")
	if e.ReconcilerNode.Backoff != "8s" || e.ReconcilerNode.Failures != 3 {
		t.Errorf("reconcilerNode = %+v", e.ReconcilerNode)
	}
}

func TestWithoutTheReconciler(t *testing.T) {
	e := Explain(Input{Node: testNode(`{"assigned": `+v10+`, "active": `+v10+`, "lastKnownGood": `+v10+`}`, "Active", "True"),
		NodeConfigs: []v1alpha1.NodeConfig{demo()}, Reconciler: report.Reconciler{Error: "find the reconciler's leader: Lease nodeconfig-system/nodeconfig-reconciler: not found"}, Now: now})
	mustContain(t, e, "The reconciler was not reachable (find the reconciler's leader: Lease nodeconfig-system/nodeconfig-reconciler: not found): the rest is what the Kubernetes API shows.",
		"Its NodeConfigReady condition is True with reason Active")
	if e.ReconcilerNode != nil {
		t.Error("reconcilerNode without the reconciler")
	}
	e = Explain(Input{Node: testNode("", "", ""), NodeConfigs: []v1alpha1.NodeConfig{demo()}, Reconciler: reachable(),
		StateError: `node "node-0" is not known to the reconciler (no such Node, or not synced yet)`, Now: now})
	mustContain(t, e, `The reconciler (127.0.0.1:7603) does not say: node "node-0" is not known to the reconciler (no such Node, or not synced yet).`,
		"It has no NodeConfigReady condition: statusd has not reported on it yet")
}

func TestSelection(t *testing.T) {
	other := demo()
	other.Name = "other"
	other.Spec.NodeSelector = &metav1.LabelSelector{}
	other.Spec.Source = nil
	e := Explain(Input{Node: testNode("", "", ""), NodeConfigs: []v1alpha1.NodeConfig{demo(), other}, Reconciler: reachable(),
		State: state(nodeconfigv1.LifecycleState_LIFECYCLE_STATE_CONFLICT), Now: now})
	mustContain(t, e, "node-0 is selected by 2 NodeConfigs (demo, other): a conflict, so the reconciler leaves the node unchanged until exactly one selects it.",
		"The reconciler sees it as CONFLICT (two or more NodeConfigs select it) under NodeConfig demo.")
	if e.NodeConfig != nil || !slices.Equal(e.SelectedBy, []string{"demo", "other"}) {
		t.Errorf("selectedBy %v, nodeConfig %+v", e.SelectedBy, e.NodeConfig)
	}

	e = Explain(Input{Node: testNode("", "", ""), NodeConfigs: []v1alpha1.NodeConfig{other}, Reconciler: reachable(), Now: now})
	mustContain(t, e, "node-0 is selected by NodeConfig other (nodeSelector everything), which wants the nodes' local default.")

	n := testNode(`{"assigned": `+v10+`, "active": `+v10+`, "lastKnownGood": `+v10+`}`, "Active", "True")
	n.Labels = nil
	e = Explain(Input{Node: n, NodeConfigs: []v1alpha1.NodeConfig{demo()}, Reconciler: reachable(), Now: now})
	mustContain(t, e, "node-0 is selected by no NodeConfig, but still has ConfigMap ns/cm key config.yaml at resourceVersion 10 assigned: it returns to its local default at the pace of the NodeConfig it left.")
	if len(e.SelectedBy) != 0 || e.SelectedBy == nil {
		t.Errorf("selectedBy = %#v, want []", e.SelectedBy)
	}
	e = Explain(Input{Node: testNode("", "", ""), Reconciler: reachable(), Now: now})
	mustContain(t, e, "node-0 is selected by no NodeConfig: it runs its local default.")
}

func TestWarningsAreTheNodesNewestFirst(t *testing.T) {
	ev := func(name, typ, reason string, at time.Duration) corev1.Event {
		return corev1.Event{InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: name}, Type: typ, Reason: reason,
			Message: reason + " message", LastTimestamp: metav1.NewTime(now.Add(at)), Count: 1}
	}
	events := []corev1.Event{
		ev("node-0", "Warning", "ConfigRolledBack", -3*time.Minute),
		ev("node-0", "Normal", "ConfigPromoted", -time.Minute),
		ev("node-1", "Warning", "UpdateFailed", -time.Minute),
		ev("node-0", "Warning", "DriftCorrected", -time.Minute),
	}
	series := corev1.Event{InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "node-0"}, Type: "Warning", Reason: "UpdateFailed",
		Message: "download\nfailed", EventTime: metav1.NewMicroTime(now.Add(-time.Hour)),
		Series: &corev1.EventSeries{Count: 4, LastObservedTime: metav1.NewMicroTime(now.Add(-2 * time.Minute))}}
	events = append(events, series)
	e := Explain(Input{Node: testNode("", "", ""), Reconciler: reachable(), Events: events, Now: now})
	var got []string
	for _, w := range e.Warnings {
		got = append(got, fmt.Sprintf("%s/%d", w.Reason, w.Count))
	}
	if !slices.Equal(got, []string{"DriftCorrected/1", "UpdateFailed/4", "ConfigRolledBack/1"}) {
		t.Fatalf("warnings = %v", got)
	}
	mustContain(t, e, "Its latest Warning events follow, newest first.")

	var b bytes.Buffer
	if err := Text(&b, e, now); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "\n  11:58:00 (2m0s ago)  UpdateFailed (x4): download failed\n") {
		t.Errorf("text:\n%s", b.String())
	}

	var many []corev1.Event
	for i := range 15 {
		many = append(many, ev("node-0", "Warning", fmt.Sprint("R", i), time.Duration(-i)*time.Minute))
	}
	if e := Explain(Input{Node: testNode("", "", ""), Events: many, Now: now}); len(e.Warnings) != MaxWarnings || e.Warnings[0].Reason != "R0" {
		t.Errorf("%d warnings, first %s", len(e.Warnings), e.Warnings[0].Reason)
	}
}

// The JSON field names are a contract for scripts (documented in --help).
func TestJSONFieldNames(t *testing.T) {
	nc := demo(cond("Ready", "True", "AllNodesActive", "m"))
	st := state(nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING)
	st.SoakEndsTime, st.NextReconcileTime, st.Backoff = timestamppb.New(now), timestamppb.New(now), durationpb.New(time.Second)
	e := Explain(Input{Node: testNode(`{"assigned": `+v10+`}`, "Soaking", "True"), NodeConfigs: []v1alpha1.NodeConfig{nc}, Reconciler: reachable(), State: st, Now: now,
		Events: []corev1.Event{{InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "node-0"}, Type: "Warning", Reason: "R"}}})
	var b bytes.Buffer
	if err := report.JSON(&b, e); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	keys := func(m any) []string { return slices.Sorted(maps.Keys(m.(map[string]any))) }
	for _, c := range []struct {
		got  any
		want []string
	}{
		{doc, []string{"active", "assigned", "condition", "error", "lastKnownGood", "node", "nodeConfig", "reconciler", "reconcilerNode", "reported", "selectedBy", "sentences", "warnings"}},
		{doc["reconciler"], []string{"reachable", "via"}},
		{doc["reconcilerNode"], []string{"backoff", "error", "failures", "nextReconcile", "nodeConfig", "soakEnds", "state"}},
		{doc["nodeConfig"], []string{"degraded", "name", "paused", "progressing", "ready"}},
		{doc["warnings"].([]any)[0], []string{"count", "message", "reason", "time"}},
	} {
		if got := keys(c.got); !slices.Equal(got, c.want) {
			t.Errorf("keys %v, want %v", got, c.want)
		}
	}
}

// A NodeConfig undone to a revision wants that revision, not what its
// ConfigMap holds now.
func TestWantsSaysThePinnedRevision(t *testing.T) {
	two := int64(2)
	nc := &v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "workers"}, Spec: v1alpha1.NodeConfigSpec{
		Source: &v1alpha1.Source{ConfigMap: &v1alpha1.ConfigMapSource{Namespace: "ns", Name: "cm", Key: "config.yaml"}, Revision: &two}}}
	if got, want := wants(nc), "revision 2 of its history, once read from ConfigMap ns/cm key config.yaml (validator yaml; kubectl nodeconfig history workers)"; got != want {
		t.Fatalf("wants %q, want %q", got, want)
	}
}
