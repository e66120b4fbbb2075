package status

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/report"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.Local)

func cond(t, s, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: t, Status: metav1.ConditionStatus(s), Reason: reason, Message: msg, LastTransitionTime: metav1.NewTime(now.Add(-time.Minute))}
}

func nodeConfig(name, pool string, paused bool, conds ...metav1.Condition) v1alpha1.NodeConfig {
	nc := v1alpha1.NodeConfig{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.NodeConfigSpec{
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": pool}},
			Source:       &v1alpha1.Source{ConfigMap: &v1alpha1.ConfigMapSource{Namespace: "kube-system", Name: "kubelet-" + pool, Key: "config.yaml"}},
			Rollout:      v1alpha1.Rollout{Paused: paused},
		},
		Status: v1alpha1.NodeConfigStatus{Conditions: conds, Selected: 2, Active: 1, Soaking: 1},
	}
	return nc
}

func testNode(name, pool, annotation string, reason, status string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if pool != "" {
		n.Labels["pool"] = pool
	}
	if annotation != "" {
		n.Annotations = map[string]string{v1alpha1.NodeAnnotationConfigStatus: annotation}
	}
	if reason != "" {
		n.Status.Conditions = []corev1.NodeCondition{{Type: v1alpha1.NodeConditionConfigReady, Status: corev1.ConditionStatus(status), Reason: reason, Message: "msg of " + name}}
	}
	return n
}

func src(cm, rv string) string {
	return `{"configMap": {"namespace": "kube-system", "name": "` + cm + `", "uid": "u", "resourceVersion": "` + rv + `", "kubeletConfigKey": "config.yaml"}}`
}

func fixture() Input {
	return Input{
		NodeConfigs: []v1alpha1.NodeConfig{
			nodeConfig("demo", "a", false,
				cond("Ready", "False", "RollingOut", "1 soaking"), cond("Progressing", "True", "RollingOut", "1 soaking"), cond("Degraded", "False", "AsExpected", "fine")),
			nodeConfig("other", "b", true,
				cond("Ready", "False", "ConfigRefused", "refused"), cond("Progressing", "False", "ConfigRefused", "refused"),
				cond("Degraded", "True", "ConfigRefused", "resourceVersion 9 fails validator kubelet: unknown field maxPodz")),
		},
		Nodes: []corev1.Node{
			testNode("n1", "a", `{"assigned": `+src("kubelet-a", "12")+`, "active": `+src("kubelet-a", "12")+`, "lastKnownGood": `+src("kubelet-a", "10")+`}`, "Soaking", "True"),
			testNode("n0", "a", `{"assigned": `+src("kubelet-a", "10")+`, "active": `+src("kubelet-a", "10")+`, "lastKnownGood": `+src("old", "3")+`}`, "Active", "True"),
			testNode("n2", "b", "", "", ""),
			testNode("n3", "", `{"error": "no\nlabels"}`, "LocalDefault", "True"),
		},
		Reconciler: report.Reconciler{Reachable: true, Via: "127.0.0.1:7603"},
		States: map[string]*nodeconfigv1.NodeState{
			"n0": {NodeName: "n0", State: nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ACTIVE},
			"n1": {NodeName: "n1", State: nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING, SoakEndsTime: timestamppb.New(now.Add(25 * time.Second))},
		},
	}
}

func TestBuildSelectsNodesPerNodeConfig(t *testing.T) {
	r := Build(fixture())
	if len(r.NodeConfigs) != 2 {
		t.Fatalf("%d NodeConfigs", len(r.NodeConfigs))
	}
	demo, other := r.NodeConfigs[0], r.NodeConfigs[1]
	var names []string
	for _, n := range demo.Nodes {
		names = append(names, n.Name)
	}
	if !slices.Equal(names, []string{"n0", "n1"}) {
		t.Fatalf("demo selects %v, want [n0 n1] by name", names)
	}
	n1 := demo.Nodes[1]
	if n1.Phase != "Soaking" || n1.Ready != "True" || n1.ReconcilerState != "SOAKING" || n1.SoakEnds == nil || !n1.SoakEnds.Equal(now.Add(25*time.Second)) {
		t.Fatalf("n1: %+v", n1)
	}
	if n1.Assigned.ResourceVersion != "12" || n1.LastKnownGood.ResourceVersion != "10" {
		t.Fatalf("n1 versions: %+v %+v", n1.Assigned, n1.LastKnownGood)
	}
	if len(other.Nodes) != 1 || other.Nodes[0].Name != "n2" || other.Nodes[0].Reported || other.Nodes[0].Phase != "" {
		t.Fatalf("other: %+v", other.Nodes)
	}
	if !other.Paused || other.Degraded.Reason != "ConfigRefused" || demo.Paused {
		t.Fatalf("paused/degraded: %+v %+v", demo, other)
	}
}

func TestTextIsATablePerNodeConfig(t *testing.T) {
	var b bytes.Buffer
	if err := Text(&b, Build(fixture()), TextOptions{Now: now}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Logf("\n%s", out)
	for _, want := range []string{
		"reconciler: 127.0.0.1:7603\n",
		"NodeConfig demo (ConfigMap kube-system/kubelet-a key config.yaml)\n",
		"  Ready=False/RollingOut  Progressing=True/RollingOut  Degraded=False/AsExpected  paused=false  selected=2 active=1 soaking=1 waiting=0 rolledBack=0 failing=0\n",
		"  Ready=False/ConfigRefused  Progressing=False/ConfigRefused  Degraded=True/ConfigRefused  paused=true",
		"  Degraded: resourceVersion 9 fails validator kubelet: unknown field maxPodz\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q", want)
		}
	}
	lines := strings.Split(out, "\n")
	row := func(name string) string {
		for _, l := range lines {
			if strings.HasPrefix(l, "    "+name+" ") {
				return l
			}
		}
		t.Fatalf("no row for %s", name)
		return ""
	}
	header := ""
	for _, l := range lines {
		if strings.HasPrefix(l, "    NODE ") {
			header = l
			break
		}
	}
	// A version of another ConfigMap than the NodeConfig's names it.
	if got := strings.Fields(row("n0")); !slices.Equal(got, []string{"n0", "Active", "True", "active", "10", "10", "kube-system/old@3", "-", "-"}) {
		t.Errorf("n0 row: %q", got)
	}
	n1 := row("n1")
	if !strings.Contains(n1, "soaking") || !strings.Contains(n1, "12:00:25 (in 25s)") {
		t.Errorf("n1 row: %q", n1)
	}
	// Columns line up under the header.
	for _, col := range []string{"ASSIGNED", "SOAK ENDS"} {
		i := strings.Index(header, col)
		if i < 0 || n1[i-1] != ' ' || n1[i] == ' ' {
			t.Errorf("column %s at %d does not start a cell in %q", col, i, n1)
		}
	}
	if got := strings.Fields(row("n2")); !slices.Equal(got, []string{"n2", "-", "-", "unknown", "?", "?", "?", "-", "-"}) {
		t.Errorf("n2 (not reported, unknown to the reconciler) row: %q", got)
	}
	if strings.Contains(out, "n3") {
		t.Error("a node no NodeConfig selects is listed")
	}
}

func TestTextWithoutTheReconciler(t *testing.T) {
	in := fixture()
	in.Reconciler, in.States = report.Reconciler{Error: "127.0.0.1:1: Unavailable: connection refused"}, nil
	var b bytes.Buffer
	if err := Text(&b, Build(in), TextOptions{Now: now}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.HasPrefix(out, "reconciler: not reachable (127.0.0.1:1: Unavailable: connection refused)") {
		t.Errorf("does not say the reconciler was not reachable:\n%s", out)
	}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "n1" {
			if !slices.Equal(f, []string{"n1", "Soaking", "True", "?", "12", "12", "10", "?", "-"}) {
				t.Errorf("n1 without the reconciler: %q", f)
			}
			return
		}
	}
	t.Errorf("no n1 row:\n%s", out)
}

func TestErrorsStayOnOneLine(t *testing.T) {
	in := fixture()
	in.NodeConfigs[0].Spec.NodeSelector = &metav1.LabelSelector{}
	var b bytes.Buffer
	if err := Text(&b, Build(in), TextOptions{Now: now}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "no labels\n") {
		t.Errorf("a multi-line error is not one line:\n%s", b.String())
	}
}

// The JSON field names are a contract for scripts (documented in --help).
func TestJSONFieldNames(t *testing.T) {
	var b bytes.Buffer
	if err := report.JSON(&b, Build(fixture())); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	keys := func(m any) []string { return slices.Sorted(maps.Keys(m.(map[string]any))) }
	if got := keys(doc); !slices.Equal(got, []string{"nodeConfigs", "reconciler"}) {
		t.Errorf("top: %v", got)
	}
	nc := doc["nodeConfigs"].([]any)[0]
	if got := keys(nc); !slices.Equal(got, []string{"counts", "degraded", "groups", "name", "nodes", "paused", "progressing", "ready", "source"}) {
		t.Errorf("nodeConfig: %v", got)
	}
	if got := keys(nc.(map[string]any)["counts"]); !slices.Equal(got, []string{"active", "failing", "rolledBack", "selected", "soaking", "waiting"}) {
		t.Errorf("counts: %v", got)
	}
	if got := keys(nc.(map[string]any)["ready"]); !slices.Equal(got, []string{"message", "reason", "since", "status", "type"}) {
		t.Errorf("condition: %v", got)
	}
	n1 := nc.(map[string]any)["nodes"].([]any)[1]
	if got := keys(n1); !slices.Equal(got, []string{"active", "assigned", "error", "lastKnownGood", "message", "name", "outcome", "phase", "ready", "reconcilerState", "reported", "soakEnds"}) {
		t.Errorf("node: %v", got)
	}
	if got := keys(n1.(map[string]any)["assigned"]); !slices.Equal(got, []string{"key", "name", "namespace", "resourceVersion", "uid"}) {
		t.Errorf("version: %v", got)
	}
}

// The waves' order and the one under way are one line; the nodes
// without the label are named so, and a list cut at its bound says how
// many waves there are.
func TestTextShowsTheWaves(t *testing.T) {
	in := fixture()
	in.NodeConfigs = in.NodeConfigs[:1]
	for _, tc := range []struct {
		waves v1alpha1.RolloutWaves
		want  string
	}{
		{v1alpha1.RolloutWaves{TopologyKey: "topology.kubernetes.io/zone", Order: []string{"a", "b", ""}, Count: 3, Current: 2},
			"  waves by topology.kubernetes.io/zone: a, b, (no label); under way: 2 of 3 (b)\n"},
		{v1alpha1.RolloutWaves{TopologyKey: "example.com/nope", Order: []string{""}, Count: 1},
			"  waves by example.com/nope: (no label); every wave done\n"},
		{v1alpha1.RolloutWaves{TopologyKey: "kubernetes.io/hostname", Order: []string{"n0", "n1"}, Count: 70, Current: 69},
			"  waves by kubernetes.io/hostname: n0, n1, ... (70 in all); under way: 69 of 70\n"},
	} {
		in.NodeConfigs[0].Status.Waves = &tc.waves
		var b bytes.Buffer
		if err := Text(&b, Build(in), TextOptions{Now: now}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), tc.want) {
			t.Errorf("missing %q in:\n%s", tc.want, b.String())
		}
	}
}
