package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The reconciler watches only the ConfigMaps NodeConfigs name: 2,000
// unrelated ConfigMaps of 100 KiB (200 MiB) in the cluster change its peak
// memory by less than 10 %.
func TestUnrelatedConfigMapsDoNotGrowTheReconciler(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 200 MiB of ConfigMaps")
	}
	const count, size = 2000, 100 << 10
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
	if _, err := e.c.Client.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
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
	growth := float64(after-before) / float64(before)
	t.Logf("reconciler peak RSS %.1f MiB before, %.1f MiB after %d unrelated ConfigMaps of %d KiB (%+.1f %%)",
		float64(before)/(1<<20), float64(after)/(1<<20), count, size>>10, 100*growth)
	if growth >= 0.10 {
		t.Fatalf("the reconciler's peak RSS grew %.1f %% with unrelated ConfigMaps; want under 10 %%", 100*growth)
	}
}
