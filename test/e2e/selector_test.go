package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// An invalid nodeSelector is refused by the API with the reason, and the
// nodes the NodeConfig selected keep their config and last-known-good
// exactly as they were: a selector that cannot be parsed selects nothing,
// and "nothing" would otherwise reset the whole fleet.
func TestInvalidNodeSelectorIsRefusedAndChangesNothing(t *testing.T) {
	e := newEnv(t, 2)
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(1)})
	for _, n := range e.nodes {
		e.waitNode(n.Name, 20*time.Second, "promoted", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
			return rv(st.LastKnownGood) == cm.ResourceVersion && reasonIs(c, "Active")
		})
	}
	e.waitNodeConfigCondition(e.label, "Ready", metav1.ConditionTrue, "AllNodesActive", 20*time.Second)
	before := []*nodeconfigv1.Records{e.records(0), e.records(1)}

	for _, tc := range []struct {
		name     string
		selector map[string]any
		want     string
	}{
		{"In with no values", map[string]any{"matchExpressions": []any{map[string]any{"key": "pool", "operator": "In", "values": []any{}}}}, "values"},
		{"NotIn with no values", map[string]any{"matchExpressions": []any{map[string]any{"key": "pool", "operator": "NotIn"}}}, "values"},
		{"Exists with values", map[string]any{"matchExpressions": []any{map[string]any{"key": "pool", "operator": "Exists", "values": []any{"a"}}}}, "values"},
		{"label value with a space", map[string]any{"matchLabels": map[string]any{"e2e": "a b"}}, "matchLabels"},
		{"label key with a space", map[string]any{"matchLabels": map[string]any{"a b": "x"}}, "matchLabels"},
		{"expression key with a space", map[string]any{"matchExpressions": []any{map[string]any{"key": "a b", "operator": "Exists"}}}, "key"},
		{"expression value too long", map[string]any{"matchExpressions": []any{map[string]any{"key": "pool", "operator": "In", "values": []any{strings.Repeat("v", 64)}}}}, "values"},
	} {
		err := e.tryNodeConfig(e.label, map[string]any{
			"nodeSelector": tc.selector,
			"source":       map[string]any{"configMap": map[string]any{"namespace": e.ns, "name": "cfg", "key": "config.yaml"}},
			"soakSeconds":  int64(1),
		})
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: the API server accepted %v (err %v); want it refused as invalid", tc.name, tc.selector, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: refusal %q does not name %q", tc.name, err, tc.want)
		}
	}
	// Let any sync the (refused or accepted) updates caused run, then check
	// the nodes' own durable records did not move.
	for _, n := range e.nodes {
		e.resyncAndWait(n.Name, 10*time.Second, nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ACTIVE)
	}
	for i, n := range e.nodes {
		if after := e.records(i); !proto.Equal(after, before[i]) {
			t.Fatalf("node %s records changed:\nbefore %v\nafter  %v", n.Name, before[i], after)
		}
		if got, _ := n.Target(); got != goodYAML {
			t.Fatalf("node %s target = %q, want the config it had", n.Name, got)
		}
	}
}

// tryNodeConfig replaces the spec of the test's NodeConfig (created by use
// or nodeConfig) and returns the API server's answer. The spec goes as
// written (a JSON patch), not through the Go type, which would drop before
// the API server sees it some of what the API must refuse (an empty values
// list).
func (e *env) tryNodeConfig(name string, spec map[string]any) error {
	e.t.Helper()
	patch, err := json.Marshal([]map[string]any{{"op": "replace", "path": "/spec", "value": spec}})
	if err != nil {
		return err
	}
	// The reconciler writes the status meanwhile; a patch names no
	// resourceVersion, and is retried on a conflict all the same.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		_, err := e.nodeConfigs().Patch(e.ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{})
		return err
	})
}
