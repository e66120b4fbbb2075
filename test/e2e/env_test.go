package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"nodeconfig.io/services/api/client/clientset"
	"nodeconfig.io/test/framework/cluster"
	"nodeconfig.io/test/framework/sim"
	"nodeconfig.io/test/framework/testenv"
)

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
	ncs        clientset.Interface
}

// newEnv starts n nodes and a reconciler. Node names and the selector label
// are unique per test, so tests do not see each other's nodes.
func newEnv(t testing.TB, n int, reconcilerArgs ...string) *env {
	t.Helper()
	e := newNodes(t, n, func(int) sim.NodeOptions { return sim.NodeOptions{} })
	e.startReconciler("r0", reconcilerArgs...)
	return e
}

// newNodes starts n nodes with the given options (their labels beside the
// test's own) and no reconciler.
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
	root := testenv.ScratchDir(t, "e2e-")
	ncs, err := clientset.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: ctx, c: c, root: root, ns: short, label: short, ncs: ncs}
	if err := sim.EnsureNamespace(ctx, c, e.ns); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		o := options(i)
		labels := map[string]string{}
		maps.Copy(labels, o.Labels)
		labels["e2e"] = short
		o.Labels = labels
		e.nodes = append(e.nodes, testenv.StartNode(t, c, root, fmt.Sprintf("%s-%d", short, i), o))
	}
	t.Cleanup(func() {
		if t.Failed() && e.reconciler != nil {
			t.Logf("--- reconciler\n%s", e.reconciler.Tail(6000))
		}
		if e.reconciler != nil {
			e.reconciler.Close()
		}
		for _, node := range e.nodes {
			testenv.StopNode(t, c, node)
		}
		// Binaries built with -race, and client-go's cache mutation
		// detector (make test's race pass), report here.
		if report := debugReport(root); report != "" {
			t.Errorf("a service of this test hit a data race or changed an informer's cached object:\n%s", report)
		}
	})
	return e
}

// debugReports mark what the race pass's detectors print: a data race,
// and an object of an informer's cache that its reader changed.
var debugReports = []string{"WARNING: DATA RACE", "ALTERED!"}

// debugReport returns the first detector report in the logs under root,
// "" if there is none.
func debugReport(root string) string {
	var report string
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".log") || report != "" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		for _, mark := range debugReports {
			if i := strings.Index(string(b), mark); i >= 0 && report == "" {
				line := strings.LastIndexByte(string(b[:i]), '\n') + 1 // the report's heading
				report = path + ":\n" + string(b[line:min(len(b), line+4000)])
			}
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

// newPromotedNode starts one node and a reconciler, and returns once the
// node runs v1 of ConfigMap "cfg" (the test's NodeConfig, with soak) as
// last-known-good.
func newPromotedNode(t testing.TB, soak time.Duration) (*env, *sim.Node, *corev1.ConfigMap) {
	t.Helper()
	e := newEnv(t, 1)
	n := e.nodes[0]
	v1 := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(soak / time.Second)})
	e.waitNode(n.Name, 20*time.Second, "v1 promoted", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.LastKnownGood) == v1.ResourceVersion && reasonIs(c, "Active")
	})
	return e, n, v1
}
