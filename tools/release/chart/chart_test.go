package chart_test

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"sigs.k8s.io/yaml"

	"nodeconfig.io/tools/release/chart"
	"nodeconfig.io/tools/release/dist"
	"nodeconfig.io/tools/release/helmrender"
)

var (
	deploy   = filepath.Join("..", "..", "..", "deploy")
	chartDir = filepath.Join(deploy, "helm", "nodeconfig")
)

// The committed chart is what deploy/ generates now: an edit of deploy/
// without 'make chart' fails here.
func TestChartIsGeneratedFromDeploy(t *testing.T) {
	files, err := chart.Generate(deploy)
	if err != nil {
		t.Fatal(err)
	}
	stale, err := chart.Stale(chartDir, files)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) > 0 {
		t.Fatalf("%s is stale: run 'make chart' and commit the result\n  %s", chartDir, strings.Join(stale, "\n  "))
	}
}

// The generator's kustomize renders deploy/ as kubectl's does (the one
// make nodebin builds): a kustomize of another version may take other kinds
// for cluster-scoped, and the chart would not install what
// 'kubectl apply -k deploy/' does. Render (install.yaml's) writes kubectl's
// very bytes.
func TestGeneratorRendersAsKubectl(t *testing.T) {
	kubectl := filepath.Join("..", "..", "..", "bin", "kubectl")
	out, err := exec.Command(kubectl, "kustomize", deploy).Output()
	if err != nil {
		t.Fatalf("%s kustomize (make nodebin builds it): %v", kubectl, err)
	}
	if rendered, err := chart.Render(deploy, chart.Overlay{}); err != nil || !bytes.Equal(rendered, out) {
		t.Errorf("Render gives other bytes than kubectl kustomize (%v)", err)
	}
	compare(t, kustomize(t, chart.Overlay{}), objects(t, out))
}

// The chart, rendered by Helm's library, installs the objects kustomize
// renders from deploy/: with its default values, deploy/ itself; with a
// component's value, deploy/ with that component; with another namespace,
// deploy/ in that namespace (components in an overlay that names the
// install's namespace, as theirs need one), every RBAC and FlowSchema subject included.
func TestChartRendersWhatKustomizeRenders(t *testing.T) {
	c, err := helmrender.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		values  map[string]any
		overlay chart.Overlay
		// rename is the namespace deploy/'s objects are renamed to.
		rename string
	}{
		{name: "default values"},
		{name: "cert-manager", values: map[string]any{"certManager": map[string]any{"enabled": true}}, overlay: chart.Overlay{Components: []string{"cert-manager"}, Extra: "namespace: nodeconfig-system\n"}},
		{name: "prometheus", values: map[string]any{"prometheus": map[string]any{"enabled": true}}, overlay: chart.Overlay{Components: []string{"prometheus"}, Extra: "namespace: nodeconfig-system\n"}},
		{name: "reconciler on workers", values: map[string]any{"reconcilerOnWorkers": map[string]any{"enabled": true}}, overlay: chart.Overlay{Components: []string{"reconciler-on-workers"}}},
		{name: "another namespace", rename: "ops-nodeconfig",
			values:  map[string]any{"namespace": "ops-nodeconfig", "certManager": map[string]any{"enabled": true}, "prometheus": map[string]any{"enabled": true}},
			overlay: chart.Overlay{Components: []string{"cert-manager", "prometheus"}, Extra: "namespace: ops-nodeconfig\n"}},
		{name: "digests and a registry",
			values: map[string]any{"image": map[string]any{"registry": "registry.example/ops", "digests": map[string]any{
				"checkpointd": "sha256:" + strings.Repeat("1", 64), "statusd": "sha256:" + strings.Repeat("2", 64), "reconciler": "sha256:" + strings.Repeat("3", 64)}}},
			overlay: chart.Overlay{Extra: `images:
  - {name: ghcr.io/nodeconfig/checkpointd, newName: registry.example/ops/checkpointd, digest: "sha256:` + strings.Repeat("1", 64) + `"}
  - {name: ghcr.io/nodeconfig/statusd, newName: registry.example/ops/statusd, digest: "sha256:` + strings.Repeat("2", 64) + `"}
  - {name: ghcr.io/nodeconfig/reconciler, newName: registry.example/ops/reconciler, digest: "sha256:` + strings.Repeat("3", 64) + `"}
`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rendered, err := helmrender.Render(c, "nodeconfig", "default", tc.values)
			if err != nil {
				t.Fatal(err)
			}
			got := objects(t, rendered)
			want := kustomize(t, tc.overlay)
			if tc.rename != "" {
				want = objects(t, []byte(strings.ReplaceAll(string(mustMarshal(t, want)), "nodeconfig-system", tc.rename)))
				checkNamespace(t, got, tc.rename)
			}
			compare(t, got, want)
		})
	}
}

// The kubelet's paths move together: the host directory and the
// container's mount of it (the agent reads the kubelet's own paths off its
// command line, so no flag names them), and the flags that name the runtime
// and the kubelet's process.
func TestChartMovesTheKubeletsPaths(t *testing.T) {
	c, err := helmrender.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := helmrender.Render(c, "nodeconfig", "default", map[string]any{"kubelet": map[string]any{
		"hostPaths": map[string]any{"target": "/var/lib/kubelet/conf.d", "kubeletConfig": "/opt/kubelet", "containerd": "/run/k3s/containerd"},
		"cgroup":    "/system.slice/k3s.service", "exePath": "/usr/local/bin/k3s",
	}})
	if err != nil {
		t.Fatal(err)
	}
	var text string
	for _, o := range objects(t, rendered) {
		if o["kind"] == "DaemonSet" {
			b, _ := yaml.Marshal(o)
			text += string(b)
		}
	}
	for _, want := range []string{
		"mountPath: /var/lib/kubelet/conf.d", "path: /var/lib/kubelet/conf.d",
		"mountPath: /opt/kubelet", "path: /opt/kubelet",
		"- --consumer-runtime-endpoint=unix:///run/k3s/containerd/containerd.sock", "path: /run/k3s/containerd",
		"- --consumer-cgroup=/system.slice/k3s.service", "- --consumer-exe-path=/usr/local/bin/k3s",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the agent's DaemonSet has no %q", want)
		}
	}
	for _, old := range []string{"/etc/kubernetes/kubelet.conf.d", "/var/lib/kubelet/config.yaml", "/run/containerd", "/usr/bin/kubelet"} {
		if strings.Contains(text, old) {
			t.Errorf("the agent's DaemonSet still names %s", old)
		}
	}
}

// checkNamespace: every namespaced object is in ns, and so is every
// ServiceAccount an RBAC binding or FlowSchema names.
func checkNamespace(t *testing.T, objs map[string]map[string]any, ns string) {
	t.Helper()
	subjects := 0
	for key, o := range objs {
		if meta, _ := o["metadata"].(map[string]any); meta["namespace"] != nil && meta["namespace"] != ns {
			t.Errorf("%s is in namespace %v", key, meta["namespace"])
		}
		var subs []any
		switch o["kind"] {
		case "RoleBinding", "ClusterRoleBinding":
			subs, _ = o["subjects"].([]any)
		case "FlowSchema":
			for _, r := range o["spec"].(map[string]any)["rules"].([]any) {
				for _, s := range r.(map[string]any)["subjects"].([]any) {
					subs = append(subs, s.(map[string]any)["serviceAccount"])
				}
			}
		}
		for _, s := range subs {
			subjects++
			if got := s.(map[string]any)["namespace"]; got != ns {
				t.Errorf("%s: subject %v is in namespace %v, not %s", key, s, got, ns)
			}
		}
	}
	if subjects < 6 {
		t.Errorf("only %d subjects checked", subjects)
	}
}

func kustomize(t *testing.T, overlay chart.Overlay) map[string]map[string]any {
	t.Helper()
	objs, err := chart.Kustomize(deploy, overlay)
	if err != nil {
		t.Fatal(err)
	}
	text, err := chart.Marshal(objs)
	if err != nil {
		t.Fatal(err)
	}
	return objects(t, text)
}

// objects parses a YAML stream into its objects by kind, namespace and name.
func objects(t *testing.T, stream []byte) map[string]map[string]any {
	t.Helper()
	objs, err := dist.Objects(stream)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func mustMarshal(t *testing.T, objs map[string]map[string]any) []byte {
	t.Helper()
	var keys []string
	for k := range objs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []byte
	for _, k := range keys {
		b, err := yaml.Marshal(objs[k])
		if err != nil {
			t.Fatal(err)
		}
		out = append(append(out, b...), "\n---\n"...)
	}
	return out
}

func compare(t *testing.T, got, want map[string]map[string]any) {
	t.Helper()
	for key, w := range want {
		g, ok := got[key]
		if !ok {
			t.Errorf("the chart does not render %s", key)
			continue
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%s differs (-kustomize +helm):\n%s", key, cmp.Diff(w, g))
		}
	}
	for key := range got {
		if _, ok := want[key]; !ok {
			t.Errorf("the chart renders %s, which kustomize does not", key)
		}
	}
	if len(want) < 30 {
		t.Errorf("only %d objects compared", len(want))
	}
}

// helm lint (Helm's library) finds nothing wrong with the chart, with its
// default values and with every component on.
func TestChartPassesHelmLint(t *testing.T) {
	for _, values := range []map[string]any{nil, {
		"certManager": map[string]any{"enabled": true}, "prometheus": map[string]any{"enabled": true},
		"reconcilerOnWorkers": map[string]any{"enabled": true},
	}} {
		l := lint.All(chartDir, values, "nodeconfig-system", false)
		for _, m := range l.Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("helm lint (values %v): %s", values, m)
			}
		}
	}
}
