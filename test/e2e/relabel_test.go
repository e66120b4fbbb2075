package e2e

import (
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"nodeconfig.io/test/framework/proc"
)

// Moving nodes between pools is a label edit: a relabelled Node takes the
// config of the NodeConfig that selects it now, and a Node that no
// NodeConfig selects any more returns to its local default. Checked against
// each node's own records.
func TestRelabelledNodesFollowTheNodeConfigThatSelectsThem(t *testing.T) {
	const pool = "e2e-pool"
	e := newEnv(t, 2)
	a := e.configMap("cfg-a", map[string]string{"config.yaml": "maxPods: 110\n"})
	b := e.configMap("cfg-b", map[string]string{"config.yaml": "maxPods: 57\n"})
	for name, cm := range map[string]string{"a": "cfg-a", "b": "cfg-b"} {
		e.use(e.label+"-"+name, cm, map[string]any{
			"soakSeconds":  int64(1),
			"nodeSelector": map[string]any{"matchLabels": map[string]any{"e2e": e.label, pool: name}},
			"rollout":      map[string]any{"maxInTrial": "100%"},
		})
	}
	relabel := func(i int, value any) {
		t.Helper()
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{pool: value}}})
		if _, err := e.c.Client.CoreV1().Nodes().Patch(e.ctx, e.nodes[i].Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// lastKnownGood waits until node i's records say it runs and proved
	// the ConfigMap version rv ("" for its local default).
	lastKnownGood := func(i int, rv, what string) {
		t.Helper()
		err := proc.WaitFor(30*time.Second, func() (bool, error) {
			r := e.records(i)
			if rv == "" {
				return r.GetAssigned() == nil && r.GetActive() == nil && r.GetLastKnownGood() == nil && r.GetLastReset() != nil, nil
			}
			return r.GetActive().GetSource().GetResourceVersion() == rv && r.GetLastKnownGood().GetSource().GetResourceVersion() == rv, nil
		})
		if err != nil {
			t.Fatalf("node %s: %s: records %v: %v", e.nodes[i].Name, what, e.records(i), err)
		}
	}

	relabel(0, "a")
	relabel(1, "b")
	lastKnownGood(0, a.ResourceVersion, "labelled into pool a")
	lastKnownGood(1, b.ResourceVersion, "labelled into pool b")

	relabel(0, "b")
	lastKnownGood(0, b.ResourceVersion, "moved from pool a to pool b")
	relabel(1, nil)
	lastKnownGood(1, "", "taken out of every pool")
	if err := e.nodes[1].WaitTargetGone(10 * time.Second); err != nil {
		t.Fatalf("node %s is in no pool and still has its drop-in: %v", e.nodes[1].Name, err)
	}
}
