// Package nodestatus reads what a Node says about its config: statusd's
// config-status annotation (the shape of core/v1 NodeConfigStatus) and the
// NodeConfigReady condition.
package nodestatus

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/report"
)

// The names statusd writes on each Node.
const (
	Annotation    = v1alpha1.NodeAnnotationConfigStatus
	ConditionType = v1alpha1.NodeConditionConfigReady
)

// Node is one Node's own account of its config.
type Node struct {
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
func Read(n *corev1.Node) Node {
	out := Node{Name: n.Name}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == ConditionType {
			out.Condition = report.FromNode(&n.Status.Conditions[i])
		}
	}
	raw, ok := n.Annotations[Annotation]
	if !ok {
		return out
	}
	var st corev1.NodeConfigStatus
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		out.Unreadable = fmt.Sprintf("annotation %s does not read: %v", Annotation, err)
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
	"LocalDefault":           "nothing is assigned; the node uses its local default",
	"Soaking":                "the assigned config is active and on trial",
	"Active":                 "the assigned config is active and last-known-good",
	"RolledBack":             "the assigned config failed to load or validate; last-known-good is active",
	"ConsumerUnhealthy":      "the kubelet did not come back healthy on the assigned config, or turned unhealthy during its soak; last-known-good is active",
	"DownloadFailed":         "the node could not download the assigned config; it retries with backoff and nothing rolled back",
	"CheckpointFailed":       "the node could not checkpoint the assigned config; it retries with backoff and nothing rolled back",
	"WriteFailed":            "the node could not write the config file (a read-only or full disk); it retries with backoff and nothing rolled back",
	"Activating":             "the config is assigned and about to be activated",
	"Restarting":             "the config is active and the agent is restarting the kubelet onto it; the soak has not begun",
	"WaitingForHealth":       "the config is active and the agent waits for the kubelet's healthz; the soak has not begun",
	"CheckpointdUnavailable": "statusd cannot reach checkpointd, so the node's records are not known",
}

// Meaning explains a NodeConfigReady reason, "" for one it does not know.
func Meaning(reason string) string { return meanings[reason] }
