package controller

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/policy"
)

// Each node transition is one Info line, whether or not it becomes an
// Event: a rollout's story stays in the logs after the Events expire. A
// failed update is no transition (the sync's own line says it failed).
func TestEachNodeTransitionIsOneInfoLine(t *testing.T) {
	var buf bytes.Buffer
	f := newFixture(t)
	f.c.o.Log = slog.New(slog.NewJSONHandler(&buf, nil))
	pool := &v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "pool-a"}}
	f.c.logTransitions("n1", pool, policy.Result{State: nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING, Events: []policy.Event{
		{Reason: v1alpha1.EventConfigAssigned, Message: "assigned ns/cm"},
		{Reason: v1alpha1.EventConfigActivated, Message: "activated ns/cm"},
		{Reason: v1alpha1.EventConfigPromoted, Message: "promoted"},
		{Warning: true, Reason: v1alpha1.EventConfigRolledBack, Message: "rolled back"},
		{Warning: true, Reason: v1alpha1.EventDriftCorrected, Message: "rewritten"},
		{Warning: true, Reason: v1alpha1.EventUpdateFailed, Message: "no agent"},
	}})
	// Assigned nothing: the node is reset to its local default.
	f.c.logTransitions("n1", pool, policy.Result{State: nodeconfigv1.LifecycleState_LIFECYCLE_STATE_LOCAL_DEFAULT, Events: []policy.Event{
		{Reason: v1alpha1.EventConfigAssigned, Message: "no config assigned: reset to the local default"},
	}})
	var got []string
	for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var l map[string]any
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if l["level"] != "INFO" || l["msg"] != "node transition" || l["node"] != "n1" || l["nodeconfig"] != "pool-a" || l["detail"] == "" {
			t.Errorf("log line %s: want an INFO \"node transition\" of node n1, NodeConfig pool-a, with its detail", line)
		}
		got = append(got, l["transition"].(string))
	}
	if want := []string{"assigned", "activated", "promoted", "rolled_back", "drift_corrected", "reset"}; !slices.Equal(got, want) {
		t.Errorf("transitions logged %q, want %q", got, want)
	}
}
