package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeconfig.io/test/framework/audit"
)

// The reconciler watches only the ConfigMaps NodeConfigs name: the API
// server's audit log shows every one of its ConfigMap requests naming the
// NodeConfig's ConfigMap in its namespace, and 2,000 unrelated ConfigMaps
// of 100 KiB (200 MiB) in the cluster grow its peak memory by less than
// half of what holding them would cost (their 200 MiB), a bound no
// allocator noise of a 50 MiB process reaches.
func TestUnrelatedConfigMapsDoNotGrowTheReconciler(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 200 MiB of ConfigMaps")
	}
	const count, size = 2000, 100 << 10
	// The reconcilers of the tests before this one asked before it.
	started := time.Now()
	e := newEnv(t, 2)
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(1), "rollout": map[string]any{"maxInTrial": "100%"}})
	for _, n := range e.nodes {
		e.waitNode(n.Name, 30*time.Second, "promoted", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
			return rv(st.LastKnownGood) == cm.ResourceVersion
		})
	}
	before := vmHWM(t, e.reconciler.Pid())

	ns := e.ns + "-unrelated"
	// An earlier run of this test (-count) left it, emptied: the test
	// cluster runs no namespace controller to delete it.
	if _, err := e.c.Client.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.c.Client.CoreV1().ConfigMaps(ns).DeleteCollection(e.ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	})
	payload := strings.Repeat("x", size)
	var g errgroup.Group
	g.SetLimit(16)
	for i := range count {
		g.Go(func() error {
			_, err := e.c.Client.CoreV1().ConfigMaps(ns).Create(e.ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("unrelated-%04d", i)},
				Data:       map[string]string{"blob": payload},
			}, metav1.CreateOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	// A change of the ConfigMap it does watch, rolled out after the flood:
	// any event the reconciler would receive has been received.
	next := e.configMap("cfg", map[string]string{"config.yaml": "maxPods: 112\n"})
	for _, n := range e.nodes {
		e.waitNode(n.Name, 60*time.Second, "the next version promoted", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
			return rv(st.LastKnownGood) == next.ResourceVersion
		})
	}
	after := vmHWM(t, e.reconciler.Pid())
	t.Logf("reconciler peak RSS %.1f MiB before, %.1f MiB after %d unrelated ConfigMaps of %d KiB (%+.1f %%)",
		float64(before)/(1<<20), float64(after)/(1<<20), count, size>>10, 100*float64(after-before)/float64(before))
	if flood := int64(count * size); after-before >= flood/2 {
		t.Errorf("the reconciler's peak RSS grew %d MiB with %d MiB of unrelated ConfigMaps; want under half of them", (after-before)>>20, flood>>20)
	}

	// What it asked for, as the API server saw it.
	var asked, unrelated []string
	err := audit.EachRequest(filepath.Join(e.c.Dir, "audit.log"), func(ev audit.Event) {
		if ev.ObjectRef.Resource != "configmaps" || !strings.HasPrefix(ev.UserAgent, "nodeconfig-reconciler") || ev.RequestReceived.Before(started) {
			return
		}
		req := ev.Verb + " " + ev.RequestURI
		if ev.ObjectRef.Namespace != e.ns || ev.ObjectRef.Name != cm.Name {
			unrelated = append(unrelated, req)
		}
		asked = append(asked, req)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(asked) == 0 {
		t.Fatal("the audit log holds no ConfigMap request of the reconciler's: it must have read its NodeConfig's ConfigMap")
	}
	if len(unrelated) > 0 {
		t.Fatalf("the reconciler asked for ConfigMaps no NodeConfig names (want only %s/%s): %q", e.ns, cm.Name, unrelated[:min(len(unrelated), 5)])
	}
}
