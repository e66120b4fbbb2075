package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/client/clientset"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/test/framework/nodeview"
	"nodeconfig.io/test/framework/proc"
)

// The reconciler's address in 'make run'.
const makeRunReconciler = "127.0.0.1:7603"

// The built kubectl plugin against 'make run's cluster: status, status -o
// json, why, pause, resume and diff, each checked against what the API
// server stores (the Node's annotation and condition, the NodeConfig's
// spec) and what the reconciler answers.
func TestKubectlPluginAgainstMakeRun(t *testing.T) {
	state, err := os.MkdirTemp("", "nc-plugin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(state) })
	plugin := filepath.Join(state, "kubectl-nodeconfig")
	if out, err := exec.Command("go", "build", "-o", plugin, "nodeconfig.io/services/kubectl-nodeconfig").CombinedOutput(); err != nil {
		t.Fatalf("build the plugin: %v\n%s", err, out)
	}
	lr := startMakeRun(t, state)
	kubeconfig := lr.kubeconfig()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(cfg)
	ncs := clientset.NewForConfigOrDie(cfg)
	ctx := context.Background()

	run := func(args ...string) (string, string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, plugin, append(args, "--kubeconfig", kubeconfig)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	mustRun := func(args ...string) string {
		t.Helper()
		out, stderr, err := run(args...)
		if err != nil {
			t.Fatalf("kubectl-nodeconfig %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
		}
		t.Logf("$ kubectl nodeconfig %s\n%s", strings.Join(args, " "), out)
		return out
	}

	// The demo rollout finishes: both nodes have the config assigned,
	// active and last-known-good, and the NodeConfig is Ready.
	nodes := []string{"node-0", "node-1"}
	err = proc.WaitFor(2*time.Minute, func() (bool, error) {
		for _, n := range nodes {
			st, c, err := nodeview.Read(ctx, kube, n)
			if err != nil || c.Reason != "Active" || nodeview.ResourceVersion(st.Assigned) == "" ||
				nodeview.ResourceVersion(st.Active) != nodeview.ResourceVersion(st.Assigned) || nodeview.ResourceVersion(st.LastKnownGood) != nodeview.ResourceVersion(st.Assigned) {
				return false, err
			}
		}
		nc, err := ncs.NodeConfigV1alpha1().NodeConfigs().Get(ctx, "demo", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return conditionReason(nc, "Ready") == "AllNodesActive", nil
	})
	if err != nil {
		t.Fatalf("the demo rollout did not finish: %v", err)
	}
	type truth struct {
		status    corev1.NodeConfigStatus
		condition *corev1.NodeCondition
	}
	truths := map[string]truth{}
	for _, n := range nodes {
		st, c, err := nodeview.Read(ctx, kube, n)
		if err != nil {
			t.Fatal(err)
		}
		truths[n] = truth{st, c}
	}
	rv := func(n string) string { return nodeview.ResourceVersion(truths[n].status.Active) }

	t.Run("status", func(t *testing.T) {
		out := mustRun("status", "--reconciler", makeRunReconciler)
		for _, want := range []string{
			"reconciler: " + makeRunReconciler + "\n",
			"NodeConfig demo (ConfigMap nodeconfig-demo/kubelet-config key config.yaml)\n",
			"  Ready=True/AllNodesActive  Progressing=False/RolloutComplete  Degraded=False/AsExpected  paused=false  selected=2 active=2 ",
			"  nodes: Active 2\n",
			"  Active (2): the assigned config is active and last-known-good\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("status does not say %q", want)
			}
		}
		for _, n := range nodes {
			got := row(out, n)
			c := truths[n].condition
			want := []string{n, c.Reason, string(c.Status), "active", rv(n), rv(n), rv(n), "-", "-"}
			if !slices.Equal(got, want) {
				t.Errorf("status row of %s = %q, want %q (from the Node)", n, got, want)
			}
		}
	})

	t.Run("status -o json", func(t *testing.T) {
		var doc struct {
			Reconciler struct {
				Reachable bool   `json:"reachable"`
				Via       string `json:"via"`
			} `json:"reconciler"`
			NodeConfigs []struct {
				Name   string `json:"name"`
				Paused bool   `json:"paused"`
				Ready  struct {
					Status string `json:"status"`
					Reason string `json:"reason"`
				} `json:"ready"`
				Counts struct {
					Selected int32 `json:"selected"`
					Active   int32 `json:"active"`
				} `json:"counts"`
				Nodes []struct {
					Name            string `json:"name"`
					Phase           string `json:"phase"`
					Ready           string `json:"ready"`
					Assigned        *jsonVersion
					Active          *jsonVersion
					LastKnownGood   *jsonVersion
					Reported        bool   `json:"reported"`
					Error           string `json:"error"`
					ReconcilerState string `json:"reconcilerState"`
				} `json:"nodes"`
			} `json:"nodeConfigs"`
		}
		if err := json.Unmarshal([]byte(mustRun("status", "-o", "json", "--reconciler", makeRunReconciler)), &doc); err != nil {
			t.Fatal(err)
		}
		if !doc.Reconciler.Reachable || doc.Reconciler.Via != makeRunReconciler || len(doc.NodeConfigs) != 1 {
			t.Fatalf("status -o json: %+v", doc)
		}
		nc := doc.NodeConfigs[0]
		if nc.Name != "demo" || nc.Paused || nc.Ready.Reason != "AllNodesActive" || nc.Counts.Selected != 2 || nc.Counts.Active != 2 || len(nc.Nodes) != 2 {
			t.Fatalf("the demo NodeConfig: %+v", nc)
		}
		for i, n := range nc.Nodes {
			tr := truths[nodes[i]]
			if n.Name != nodes[i] || n.Phase != tr.condition.Reason || n.Ready != string(tr.condition.Status) || !n.Reported || n.Error != tr.status.Error || n.ReconcilerState != "ACTIVE" {
				t.Errorf("node %d: %+v", i, n)
			}
			for name, pair := range map[string][2]any{"assigned": {n.Assigned, tr.status.Assigned}, "active": {n.Active, tr.status.Active}, "lastKnownGood": {n.LastKnownGood, tr.status.LastKnownGood}} {
				got, want := pair[0].(*jsonVersion), pair[1].(*corev1.NodeConfigSource)
				if got == nil || want == nil || got.ResourceVersion != want.ConfigMap.ResourceVersion || got.UID != string(want.ConfigMap.UID) ||
					got.Namespace != want.ConfigMap.Namespace || got.Name != want.ConfigMap.Name || got.Key != want.ConfigMap.KubeletConfigKey {
					t.Errorf("%s %s = %+v, the annotation says %+v", n.Name, name, got, want)
				}
			}
		}
	})

	t.Run("status -o yaml, name; kubectl's flags", func(t *testing.T) {
		var fromJSON, fromYAML map[string]any
		if err := json.Unmarshal([]byte(mustRun("status", "-o", "json", "--reconciler", makeRunReconciler)), &fromJSON); err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal([]byte(mustRun("status", "-o", "yaml", "--reconciler", makeRunReconciler)), &fromYAML); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fromJSON, fromYAML) {
			t.Errorf("status -o yaml differs from -o json:\n%v\n%v", fromYAML, fromJSON)
		}
		if out := mustRun("status", "demo", "-o", "name", "--reconciler", makeRunReconciler); out != "node/node-0\nnode/node-1\n" {
			t.Errorf("status -o name: %q", out)
		}
		// --request-timeout=0 means no timeout, as for kubectl; --context
		// names the kubeconfig's context.
		cfg, err := clientcmd.LoadFromFile(kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		if out := mustRun("status", "--request-timeout=0", "--context", cfg.CurrentContext, "--reconciler", makeRunReconciler); !strings.Contains(out, "  nodes: Active 2\n") {
			t.Errorf("status --request-timeout=0 --context %s:\n%s", cfg.CurrentContext, out)
		}
		if _, stderr, err := run("status", "--context", "no-such-context"); err == nil || !strings.Contains(stderr, "no-such-context") {
			t.Errorf("status --context no-such-context: %v, %q", err, stderr)
		}
	})

	t.Run("version", func(t *testing.T) {
		var v struct {
			Client struct {
				Version string `json:"version"`
			} `json:"client"`
			Server struct {
				GitVersion string `json:"gitVersion"`
			} `json:"server"`
			Reconciler struct {
				Error string `json:"error"`
			} `json:"reconciler"`
		}
		if err := json.Unmarshal([]byte(mustRun("version", "-o", "json")), &v); err != nil {
			t.Fatal(err)
		}
		info, err := kube.Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		// make run's reconciler holds the Lease as "local", which names no pod.
		if v.Client.Version == "" || v.Server.GitVersion != info.GitVersion || !strings.Contains(v.Reconciler.Error, `held by "local"`) {
			t.Errorf("version -o json: %+v; the API server says %s", v, info.GitVersion)
		}
	})

	t.Run("why", func(t *testing.T) {
		out := mustRun("why", "node-0", "--reconciler", makeRunReconciler)
		for _, want := range []string{
			"node-0 is selected by NodeConfig demo (nodeSelector nodeconfig.io/demo=true), which wants ConfigMap nodeconfig-demo/kubelet-config key config.yaml (validator kubelet).\n",
			fmt.Sprintf("Its NodeConfigReady condition is %s with reason %s since ", truths["node-0"].condition.Status, truths["node-0"].condition.Reason),
			fmt.Sprintf("It has ConfigMap nodeconfig-demo/kubelet-config key config.yaml at resourceVersion %s assigned, active and last-known-good.\n", rv("node-0")),
			"The reconciler sees it as ACTIVE (its assigned config is active and last-known-good).\n",
			"NodeConfig demo is Ready (AllNodesActive)",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("why node-0 does not say %q", want)
			}
		}
		var doc struct {
			SelectedBy     []string `json:"selectedBy"`
			ReconcilerNode struct {
				NodeConfig string `json:"nodeConfig"`
				State      string `json:"state"`
			} `json:"reconcilerNode"`
			Active *jsonVersion `json:"active"`
		}
		if err := json.Unmarshal([]byte(mustRun("why", "node-1", "-o", "json", "--reconciler", makeRunReconciler)), &doc); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(doc.SelectedBy, []string{"demo"}) || doc.ReconcilerNode.State != "ACTIVE" || doc.ReconcilerNode.NodeConfig != "demo" || doc.Active == nil || doc.Active.ResourceVersion != rv("node-1") {
			t.Errorf("why node-1 -o json: %+v", doc)
		}
	})

	t.Run("pause and resume", func(t *testing.T) {
		out := mustRun("pause", "demo")
		if !strings.HasPrefix(out, "NodeConfig demo paused (spec.rollout.paused=true, generation ") {
			t.Errorf("pause says %q", out)
		}
		if got := pausedInSpec(t, ncs, "demo"); got != true {
			t.Fatalf("after pause, spec.rollout.paused = %v", got)
		}
		if out := mustRun("status", "demo", "--reconciler", makeRunReconciler); !strings.Contains(out, "  paused=true  ") {
			t.Errorf("status after pause does not say paused=true")
		}
		if out := mustRun("why", "node-0", "--reconciler", makeRunReconciler); !strings.Contains(out, "NodeConfig demo is paused (spec.rollout.paused)") {
			t.Errorf("why after pause does not say the NodeConfig is paused")
		}
		var r struct {
			Name       string `json:"name"`
			Paused     *bool  `json:"paused"`
			Generation int64  `json:"generation"`
		}
		if err := json.Unmarshal([]byte(mustRun("resume", "demo", "-o", "json")), &r); err != nil {
			t.Fatal(err)
		}
		nc, err := ncs.NodeConfigV1alpha1().NodeConfigs().Get(ctx, "demo", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Name != "demo" || r.Paused == nil || *r.Paused || r.Generation != nc.Generation {
			t.Errorf("resume -o json = %+v, the NodeConfig's generation %d", r, nc.Generation)
		}
		if got := pausedInSpec(t, ncs, "demo"); got != false {
			t.Fatalf("after resume, spec.rollout.paused = %v", got)
		}
		if _, stderr, err := run("pause", "no-such-nodeconfig"); err == nil || !strings.Contains(stderr, "NodeConfig no-such-nodeconfig") {
			t.Errorf("pausing a missing NodeConfig: %v, %q", err, stderr)
		}
	})

	t.Run("without the reconciler", func(t *testing.T) {
		closed := closedAddr(t)
		out := mustRun("status", "--reconciler", closed)
		if !strings.HasPrefix(out, "reconciler: not reachable ("+closed+": Unavailable") {
			t.Errorf("status does not say the reconciler was not reachable")
		}
		for _, n := range nodes {
			c := truths[n].condition
			if got, want := row(out, n), []string{n, c.Reason, string(c.Status), "?", rv(n), rv(n), rv(n), "?", "-"}; !slices.Equal(got, want) {
				t.Errorf("status row of %s without the reconciler = %q, want %q", n, got, want)
			}
		}
		if out := mustRun("why", "node-0", "--reconciler", closed); !strings.Contains(out, "The reconciler was not reachable ("+closed+": Unavailable") ||
			!strings.Contains(out, "Its NodeConfigReady condition is True with reason Active") {
			t.Errorf("why without the reconciler:\n%s", out)
		}
		// Without --reconciler: the Lease's holder in make run is no pod.
		if out := mustRun("status"); !strings.Contains(out, "reconciler: not reachable (find the reconciler's leader: ") {
			t.Errorf("status without --reconciler in make run:\n%s", out)
		}
		_, stderr, err := run("diff", "node-0", "--reconciler", closed)
		if err == nil || !strings.Contains(stderr, "error: diff needs the reconciler, which is not reachable: "+closed) {
			t.Errorf("diff without the reconciler: %v, %q", err, stderr)
		}
	})

	// validate --node: the file's payload judged on each node by its agent,
	// merged with that node's own files (node-0's base says maxPods 110,
	// node-1's 250), which the central check never sees; a payload the
	// central check refuses is not sent; a node that does not exist is an
	// error.
	t.Run("validate --node", func(t *testing.T) {
		check, err := proc.Binary("nodeconfig-kubelet-check")
		if err != nil {
			t.Fatal(err)
		}
		validate := func(args ...string) (string, string, int) {
			t.Helper()
			out, stderr, err := run(append([]string{"validate", "--kubelet-check-binary", check, "--reconciler", makeRunReconciler}, args...)...)
			t.Logf("$ kubectl nodeconfig validate %s\n%s%s", strings.Join(args, " "), out, stderr)
			return out, stderr, exitCode(err)
		}
		file := func(payload string) string {
			p := filepath.Join(t.TempDir(), "demo.yaml")
			doc := "apiVersion: nodeconfig.io/v1alpha1\nkind: NodeConfig\nmetadata: {name: demo}\nspec:\n" +
				"  nodeSelector: {matchLabels: {nodeconfig.io/demo: \"true\"}}\n  validator: kubelet\n" +
				"  source: {configMap: {namespace: nodeconfig-demo, name: kubelet-config, key: config.yaml}}\n---\n" +
				"apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: nodeconfig-demo, name: kubelet-config}\ndata:\n" +
				"  config.yaml: \"" + strings.ReplaceAll(payload, "\n", `\n`) + "\"\n"
			if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}
		header := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
		good := file(header + "registryPullQPS: 9\n")
		maxPods := regexp.MustCompile(`(?m)^maxPods: (\d+)$`)
		for n, want := range map[string]string{"node-0": "110", "node-1": "250"} {
			out, stderr, code := validate("-f", good, "--node", n, "-o", "json")
			if code != 0 {
				t.Fatalf("validate --node %s: exit %d: %s", n, code, stderr)
			}
			var r struct {
				Checks []struct {
					Verdict string `json:"verdict"`
					Node    *struct {
						Verdict, Candidate, Diff string
						Selected                 *bool
						Merged                   bool
					} `json:"node"`
				} `json:"checks"`
			}
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatal(err)
			}
			if len(r.Checks) != 1 || r.Checks[0].Verdict != "Passed" || r.Checks[0].Node == nil {
				t.Fatalf("validate --node %s: %s", n, out)
			}
			c := r.Checks[0].Node
			if c.Verdict != "Passed" || !c.Merged || c.Selected == nil || !*c.Selected || !strings.Contains(c.Diff, "+registryPullQPS: 9\n") {
				t.Errorf("validate --node %s: the node's verdict %+v", n, c)
			}
			if m := maxPods.FindStringSubmatch(c.Candidate); m == nil || m[1] != want {
				t.Errorf("validate --node %s: the merged config has maxPods %v, want %s (the node's base config's):\n%s", n, m, want, c.Candidate)
			}
		}
		if out, _, code := validate("-f", good, "--node", "node-1"); code != 0 || !strings.Contains(out, "validator kubelet: passed\n  on node node-1: passed: its effective config would change:\n") ||
			!strings.Contains(out, "    +registryPullQPS: 9\n") || !strings.HasSuffix(out, "1 passed, 0 refused, 0 unjudged\n") {
			t.Errorf("validate --node node-1:\n%s", out)
		}

		// The central check judges over the kubelet's defaults, with no
		// host: failCgroupV1 is the node's to judge, against its host's
		// cgroups (the agents of make run share this machine's).
		cgroupV1 := file(header + "failCgroupV1: true\n")
		out, _, code := validate("-f", cgroupV1, "--node", "node-0")
		if _, statErr := os.Stat("/sys/fs/cgroup/cgroup.controllers"); statErr == nil {
			if code != 0 || !strings.Contains(out, "  on node node-0: passed") {
				t.Errorf("failCgroupV1: true on a cgroup v2 host: exit %d, want passed on the node too", code)
			}
		} else if code != 1 || !strings.Contains(out, "validator kubelet: passed\n  on node node-0: refused: ") || !strings.Contains(out, "cgroup v1") {
			t.Errorf("failCgroupV1: true on a cgroup v1 host: exit %d, want passed centrally, refused by the node with the kubelet's words, exit 1", code)
		}

		bad := file(header + "hairpinMode: bogus\n")
		if out, _, code := validate("-f", bad, "--node", "node-0"); code != 1 || !strings.Contains(out, `refused: invalid KubeletConfiguration: invalid configuration: option "bogus" specified for hairpinMode`) || strings.Contains(out, "on node") {
			t.Errorf("validate --node of the bad example: exit %d, want 1, the kubelet's words and no node asked", code)
		}
		if _, stderr, code := validate("-f", good, "--node", "node-9"); code != 1 || !strings.Contains(stderr, `error: --node node-9: nodes "node-9" not found`) {
			t.Errorf("validate --node node-9: exit %d, %q", code, stderr)
		}
	})

	t.Run("diff", func(t *testing.T) {
		conn, err := grpc.NewClient(makeRunReconciler, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		// diff is this reconciler's to answer: a reconciler without
		// PreviewNode is a failure of the build under test, not a reason
		// to skip.
		if _, err := nodeconfigv1.NewReconcilerServiceClient(conn).PreviewNode(cctx, &nodeconfigv1.PreviewNodeRequest{NodeName: "node-0"}); status.Code(err) == codes.Unimplemented {
			t.Fatalf("the reconciler at %s does not implement PreviewNode: %v", makeRunReconciler, err)
		}
		// Paused, the nodes keep the drop-in they run while diff previews
		// the next one.
		mustRun("pause", "demo")
		paused := true
		defer func() {
			if paused {
				_, _, _ = run("resume", "demo")
			}
		}()
		// A drop-in that leaves maxPods to each node's base config (node-0
		// 110, node-1 250): the effective configs differ by node.
		dropIn := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nserializeImagePulls: false\nregistryPullQPS: 7\n"
		patch, _ := json.Marshal(map[string]any{"data": map[string]string{"config.yaml": dropIn}})
		if _, err := kube.CoreV1().ConfigMaps("nodeconfig-demo").Patch(ctx, "kubelet-config", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		type result struct {
			NodeConfig string       `json:"nodeConfig"`
			Source     *jsonVersion `json:"source"`
			Payload    string       `json:"payload"`
			Files      []string     `json:"files"`
			Merged     bool         `json:"merged"`
			Current    string       `json:"current"`
			Candidate  string       `json:"candidate"`
			Refused    string       `json:"refused"`
			Diff       string       `json:"diff"`
		}
		results := map[string]result{}
		for _, n := range nodes {
			var r result
			var out, stderr string
			err := proc.WaitFor(30*time.Second, func() (bool, error) {
				var err error
				if out, stderr, err = run("diff", n, "-o", "json", "--reconciler", makeRunReconciler); err != nil {
					return false, fmt.Errorf("%v: %s", err, stderr)
				}
				r = result{}
				return json.Unmarshal([]byte(out), &r) == nil && r.Payload == dropIn, nil
			})
			if err != nil {
				t.Fatalf("diff %s -o json never previewed the new drop-in: %v\n%s%s", n, err, out, stderr)
			}
			if r.NodeConfig != "demo" || r.Source == nil || r.Source.Name != "kubelet-config" || !r.Merged || len(r.Files) == 0 || r.Refused != "" || r.Candidate == "" {
				t.Fatalf("diff %s -o json: %+v", n, r)
			}
			results[n] = r
		}
		maxPods := regexp.MustCompile(`(?m)^maxPods: (\d+)$`)
		for n, want := range map[string]string{"node-0": "110", "node-1": "250"} {
			m := maxPods.FindStringSubmatch(results[n].Candidate)
			if m == nil || m[1] != want {
				t.Errorf("%s's effective config with the drop-in has maxPods %v, want %s (its base config's):\n%s", n, m, want, results[n].Candidate)
			}
			if !strings.Contains(results[n].Candidate, "registryPullQPS: 7") {
				t.Errorf("%s's effective config with the drop-in lacks the drop-in's registryPullQPS: 7", n)
			}
		}
		if results["node-0"].Candidate == results["node-1"].Candidate {
			t.Error("node-0 and node-1 would run the same effective config")
		}
		out := mustRun("diff", "node-1", "--reconciler", makeRunReconciler)
		for _, want := range []string{
			"NodeConfig demo wants ConfigMap nodeconfig-demo/kubelet-config key config.yaml at resourceVersion ",
			"\nThe drop-in:\n  apiVersion: kubelet.config.k8s.io/v1beta1\n  kind: KubeletConfiguration\n  serializeImagePulls: false\n  registryPullQPS: 7\n",
			"\nThe node merges, in order: " + strings.Join(results["node-1"].Files, ", ") + ".\n",
			"+registryPullQPS: 7\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("diff node-1 does not say %q", want)
			}
		}
		if results["node-1"].Diff == "" || !strings.Contains(out, results["node-1"].Diff) {
			t.Errorf("diff node-1 does not print the unified diff of -o json")
		}

		// Resumed, each node runs what diff previewed: the version it
		// pinned, active, and on the node's disk the file diff showed.
		mustRun("resume", "demo")
		paused = false
		err = proc.WaitFor(time.Minute, func() (bool, error) {
			for _, n := range nodes {
				st, c, err := nodeview.Read(ctx, kube, n)
				if err != nil || c.Reason != "Active" || nodeview.ResourceVersion(st.Active) != results[n].Source.ResourceVersion {
					return false, err
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("after resume the nodes never ran the previewed version: %v", err)
		}
		for _, n := range nodes {
			path := lr.targetFile(n)
			if path == "" {
				t.Fatalf("localrun named no target file for %s", n)
			}
			onDisk, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%s's file: %v", n, err)
			}
			if string(onDisk) != results[n].Payload {
				t.Errorf("%s wrote %s after resume:\n%s\ndiff previewed:\n%s", n, path, onDisk, results[n].Payload)
			}
		}
	})
}

// exitCode is a finished command's exit status (-1: it did not exit).
func exitCode(err error) int {
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.ExitCode()
	}
	return -1
}

type jsonVersion struct {
	Namespace       string `json:"namespace"`
	Name            string `json:"name"`
	UID             string `json:"uid"`
	ResourceVersion string `json:"resourceVersion"`
	Key             string `json:"key"`
}

// row is the fields of a node's line in status's table.
func row(out, node string) []string {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == node {
			return f
		}
	}
	return nil
}

func conditionReason(nc *v1alpha1.NodeConfig, typ string) string {
	if c := meta.FindStatusCondition(nc.Status.Conditions, typ); c != nil {
		return c.Reason
	}
	return ""
}

// pausedInSpec is spec.rollout.paused as the API server stores it, nil
// when absent: read as JSON, since the Go type cannot tell absent from
// false.
func pausedInSpec(t *testing.T, ncs clientset.Interface, name string) any {
	t.Helper()
	raw, err := ncs.NodeConfigV1alpha1().RESTClient().Get().Resource("nodeconfigs").Name(name).DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var nc struct {
		Spec struct {
			Rollout map[string]any `json:"rollout"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(raw, &nc); err != nil {
		t.Fatal(err)
	}
	return nc.Spec.Rollout["paused"]
}

func closedAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// startMakeRun starts 'make run' headless (two nodes, a 5 s soak) as the
// make-run test does, and returns its kubeconfig; it is stopped with
// Ctrl-C when the test ends.
func startMakeRun(t *testing.T, state string) *localRun {
	t.Helper()
	run := startLocalRun(t, state)
	t.Cleanup(func() {
		if err := run.ctrlC(); err != nil {
			t.Errorf("localrun after Ctrl-C: %v", err)
		}
	})
	return run
}
