// Package nodestatus reads what a Node says about its config: statusd's
// config-status annotation (the shape of core/v1 NodeConfigStatus) and the
// NodeConfigReady condition.
package nodestatus

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"nodeconfig.io/proto/nodeconfig/records"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/report"
)

// Account is one Node's own account of its config.
type Account struct {
	Name string
	// Condition is NodeConfigReady; nil until statusd reports.
	Condition *report.Condition
	// Reported is whether the annotation is there and reads.
	Reported bool
	// Unreadable says why the annotation does not read; empty otherwise.
	Unreadable    string
	Assigned      *report.Version
	Active        *report.Version
	LastKnownGood *report.Version
	// Error is the node's error; test it for emptiness, do not parse it.
	Error string
}

// Read reads the node's annotation and condition. A missing or unreadable
// annotation is not an error: Reported says so.
func Read(n *corev1.Node) Account {
	out := Account{Name: n.Name}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == v1alpha1.NodeConditionConfigReady {
			out.Condition = report.FromNode(&n.Status.Conditions[i])
		}
	}
	st, ok, err := v1alpha1.NodeConfigStatusOf(n.Annotations)
	if !ok {
		return out
	}
	if err != nil {
		out.Unreadable = fmt.Sprintf("annotation %s does not read: %v", v1alpha1.NodeAnnotationConfigStatus, err)
		return out
	}
	out.Reported = true
	out.Assigned = report.FromSource(st.Assigned)
	out.Active = report.FromSource(st.Active)
	out.LastKnownGood = report.FromSource(st.LastKnownGood)
	out.Error = st.Error
	return out
}

// Meanings of the NodeConfigReady reasons (the README's table).
var meanings = map[string]string{
	v1alpha1.NodeReasonLocalDefault:           "nothing is assigned; the node uses its local default",
	v1alpha1.NodeReasonSoaking:                "the assigned config is active and on trial",
	v1alpha1.NodeReasonActive:                 "the assigned config is active and last-known-good",
	v1alpha1.NodeReasonRolledBack:             "the assigned config failed to load or validate; last-known-good is active",
	records.ReasonConsumerUnhealthy:           "the kubelet did not come back healthy on the assigned config, or turned unhealthy during its soak; last-known-good is active",
	records.ReasonHealthGateFailed:            "the kubelet ran the assigned config healthy, but the node did not (not Ready, under pressure, or its pods not Ready again); last-known-good is active",
	v1alpha1.NodeReasonDownloadFailed:         "the node could not download the assigned config; it retries with backoff and nothing rolled back",
	v1alpha1.NodeReasonCheckpointFailed:       "the node could not checkpoint the assigned config; it retries with backoff and nothing rolled back",
	records.ReasonWriteFailed:                 "the node could not write the config file (a read-only or full disk); it retries with backoff and nothing rolled back",
	records.ReasonKubeletNoConfigDir:          "the node's kubelet runs without --config-dir, so it reads no drop-in and none is written; the message says the flag to add, and the node goes on by itself once the kubelet has it",
	v1alpha1.NodeReasonActivating:             "the config is assigned and about to be activated",
	v1alpha1.NodeReasonDraining:               "the change needs a drain first: the node is cordoned and its pods evicted; nothing is written yet",
	records.ReasonDrainFailed:                 "the drain before the change did not finish within its bound (the message names the pods left); the node is uncordoned, the kubelet not restarted, and the drain is tried again later",
	v1alpha1.NodeReasonRestarting:             "the config is active and the agent is restarting the kubelet onto it; the soak has not begun",
	v1alpha1.NodeReasonWaitingForHealth:       "the config is active and the agent waits for the kubelet's healthz; the soak has not begun",
	v1alpha1.NodeReasonCheckpointdUnavailable: "statusd cannot reach checkpointd, so the node's records are not known",
}

// Meaning explains a NodeConfigReady reason, "" for one it does not know.
func Meaning(reason string) string { return meanings[reason] }
