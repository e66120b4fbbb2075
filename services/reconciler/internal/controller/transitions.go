package controller

import (
	"strings"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/policy"
)

// transitions names, by Event reason, what a sync did to a node. A failed
// update is none: the sync's own line says it failed.
var transitions = map[string]string{
	v1alpha1.EventConfigAssigned:   "assigned",
	v1alpha1.EventConfigActivated:  "activated",
	v1alpha1.EventConfigPromoted:   "promoted",
	v1alpha1.EventConfigRolledBack: "rolled_back",
	v1alpha1.EventDriftCorrected:   "drift_corrected",
}

// logTransitions writes one Info line per transition of a node's sync,
// whether or not it becomes an Event (Normal ones are off by default, and
// Events expire within the hour): a rollout's story stays in the logs.
func (c *Controller) logTransitions(node string, nc *v1alpha1.NodeConfig, res policy.Result) {
	for _, e := range res.Events {
		t, ok := transitions[e.Reason]
		if !ok {
			continue
		}
		if t == "assigned" && res.State == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_LOCAL_DEFAULT {
			t = "reset"
		}
		ncName := ""
		if nc != nil {
			ncName = nc.Name
		}
		c.o.Log.Info("node transition", "node", node, "transition", t, "nodeconfig", ncName,
			"state", strings.ToLower(strings.TrimPrefix(res.State.String(), "LIFECYCLE_STATE_")),
			"assigned", records.Describe(res.Records.GetAssigned().GetSource()), "detail", e.Message)
	}
}
