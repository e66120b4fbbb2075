package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"nodeconfig.io/test/cluster"
	"nodeconfig.io/test/nodeview"
	"nodeconfig.io/test/proc"
	"nodeconfig.io/test/sim"
)

var nodeConfigs = schema.GroupVersionResource{Group: "nodeconfig.io", Version: "v1alpha1", Resource: "nodeconfigs"}

// env is one test's world: its own nodes (labelled with the test's name),
// its own namespace for ConfigMaps, and a reconciler.
type env struct {
	t          testing.TB
	ctx        context.Context
	c          *cluster.Cluster
	root       string
	ns         string
	label      string
	nodes      []*sim.Node
	reconciler *sim.Reconciler
	dyn        dynamic.Interface
}

// newEnv starts n nodes and a reconciler. Node names and the selector label
// are unique per test, so tests do not see each other's nodes.
func newEnv(t testing.TB, n int, reconcilerArgs ...string) *env {
	t.Helper()
	e := newNodes(t, n, func(int) sim.NodeOptions { return sim.NodeOptions{} })
	e.startReconciler("r0", reconcilerArgs...)
	return e
}

// newNodes starts n nodes with the given options and no reconciler.
func newNodes(t testing.TB, n int, options func(i int) sim.NodeOptions) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := cluster.Shared
	short := strings.ToLower(strings.NewReplacer("_", "-", "/", "-").Replace(t.Name()))
	if len(short) > 40 {
		short = short[len(short)-40:]
	}
	short = strings.Trim(short, "-")
	root, err := os.MkdirTemp("", "e2e-")
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: ctx, c: c, root: root, ns: short, label: short, dyn: dyn}
	if err := sim.EnsureNamespace(ctx, c, e.ns); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		o := options(i)
		o.Labels = map[string]string{"e2e": short}
		node, err := sim.StartNodeWith(ctx, c, root, fmt.Sprintf("%s-%d", short, i), o)
		if err != nil {
			t.Fatal(err)
		}
		e.nodes = append(e.nodes, node)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, node := range e.nodes {
				t.Log(node.Logs())
			}
			if e.reconciler != nil {
				t.Logf("--- reconciler\n%s", e.reconciler.Tail(6000))
			}
		}
		if e.reconciler != nil {
			e.reconciler.Close()
		}
		for _, node := range e.nodes {
			node.Stop()
			_ = c.Client.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{})
		}
		// Binaries built with -race (make test's race pass) report here.
		if report := raceReport(root); report != "" {
			t.Errorf("a service of this test hit a data race:\n%s", report)
		}
		if !t.Failed() {
			_ = os.RemoveAll(root)
		}
	})
	return e
}

// raceReport returns the first race detector report in the logs under
// root, "" if there is none.
func raceReport(root string) string {
	var report string
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".log") || report != "" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		if i := strings.Index(string(b), "WARNING: DATA RACE"); i >= 0 {
			report = path + ":\n" + string(b[i:min(len(b), i+4000)])
		}
		return nil
	})
	return report
}

func (e *env) startReconciler(identity string, args ...string) *sim.Reconciler {
	e.t.Helper()
	// Each test has its own lease so that reconcilers of other tests never
	// compete with this one. The suite drives the nodes' own validation
	// (rollbacks, halts), which the reconciler's central validation would
	// pre-empt: it is on only where a test asks for it
	// (TestCentralValidationRefusesBeforeAnyNode).
	args = append([]string{"--leader-elect-name", "nc-" + e.label, "--leader-elect-lease-duration", "4s",
		"--leader-elect-renew-deadline", "3s", "--leader-elect-retry-period", "500ms", "--node-validation-only"}, args...)
	r, err := sim.StartReconciler(e.ctx, e.c, e.root, identity, args...)
	if err != nil {
		e.t.Fatal(err)
	}
	if e.reconciler == nil {
		e.reconciler = r
	}
	return r
}

// configMap creates or updates a ConfigMap and returns it.
func (e *env) configMap(name string, data map[string]string) *corev1.ConfigMap {
	e.t.Helper()
	cms := e.c.Client.CoreV1().ConfigMaps(e.ns)
	cm, err := cms.Get(e.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm, err = cms.Create(e.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}, metav1.CreateOptions{})
	} else if err == nil {
		cm.Data = data
		cm, err = cms.Update(e.ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return cm
}

// nodeConfig creates or replaces the test's NodeConfig.
func (e *env) nodeConfig(name string, spec map[string]any, annotations map[string]string) {
	e.t.Helper()
	if spec["nodeSelector"] == nil {
		spec["nodeSelector"] = map[string]any{"matchLabels": map[string]any{"e2e": e.label}}
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nodeconfig.io/v1alpha1", "kind": "NodeConfig",
		"metadata": map[string]any{"name": name},
		"spec":     spec,
	}}
	if annotations != nil {
		obj.SetAnnotations(annotations)
	}
	client := e.dyn.Resource(nodeConfigs)
	cur, err := client.Get(e.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = client.Create(e.ctx, obj, metav1.CreateOptions{})
	} else if err == nil {
		obj.SetResourceVersion(cur.GetResourceVersion())
		obj.SetFinalizers(cur.GetFinalizers())
		_, err = client.Update(e.ctx, obj, metav1.UpdateOptions{})
	}
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { e.deleteNodeConfigAndWait(name) })
}

func (e *env) deleteNodeConfigAndWait(name string) {
	client := e.dyn.Resource(nodeConfigs)
	if err := client.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		e.t.Errorf("delete NodeConfig %s: %v", name, err)
		return
	}
	err := proc.WaitFor(30*time.Second, func() (bool, error) {
		_, err := client.Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	if err != nil {
		e.t.Errorf("NodeConfig %s not gone: %v", name, err)
	}
}

// status reads a node's NodeConfigStatus annotation, as users see it.
func (e *env) status(node string) (corev1.NodeConfigStatus, *corev1.NodeCondition, error) {
	return nodeview.Read(e.ctx, e.c.Client, node)
}

// waitNode waits until check accepts the node's status and condition.
func (e *env) waitNode(node string, timeout time.Duration, what string, check func(st corev1.NodeConfigStatus, cond *corev1.NodeCondition) bool) {
	e.t.Helper()
	var last string
	err := proc.WaitFor(timeout, func() (bool, error) {
		st, cond, err := e.status(node)
		if err != nil {
			return false, err
		}
		b, _ := json.Marshal(st)
		last = fmt.Sprintf("status %s condition %s/%s %q", b, cond.Status, cond.Reason, cond.Message)
		return check(st, cond), nil
	})
	if err != nil {
		e.t.Fatalf("node %s: waiting for %s: %v (last: %s)", node, what, err, last)
	}
}

func rv(src *corev1.NodeConfigSource) string { return nodeview.ResourceVersion(src) }

func reasonIs(cond *corev1.NodeCondition, reason string) bool {
	return cond != nil && cond.Reason == reason
}
