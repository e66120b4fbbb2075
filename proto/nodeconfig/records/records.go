// Package records holds the meanings of a node's records (the generated
// nodeconfigv1.Records and the ConfigSources in them) that every service
// must read the same way: what a node reports, when a config's soak begins
// and ends, and whether a version failed late. They are written by hand,
// as functions over the generated types rather than methods beside them,
// so that regenerating the contract leaves them alone and each rule has
// one definition.
package records

import (
	"fmt"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// The reasons of the errors the node itself records. They are defined here
// once: checkpointd and its agent record them, the reconciler decides on
// them, statusd makes them the reason of the Node's condition and
// kubectl-nodeconfig explains them.
const (
	// ReasonWriteFailed is the early error checkpointd records when it
	// cannot write the target file (a read-only or full disk): nothing is
	// rolled back, the reconciler retries, and checkpointd clears it once a
	// write succeeds.
	ReasonWriteFailed = "WriteFailed"

	// ReasonConsumerUnhealthy is the late error of a config the node's
	// consumer (the kubelet) does not run healthy: checkpointd records it
	// when it rolls back, statusd makes it the condition's reason.
	ReasonConsumerUnhealthy = "ConsumerUnhealthy"

	// ReasonStartGuardFellBack is the late error of a config the kubelet
	// could not start on while no agent ran: the host-side start guard put
	// last-known-good back, and the agent records it at its start.
	ReasonStartGuardFellBack = "StartGuardFellBack"

	// ReasonHealthGateFailed is the late error of a config the kubelet runs
	// healthy but the node does not: a health gate (the Node's Ready or
	// pressure conditions, the node's pods Ready again) failed during its
	// soak, and checkpointd rolled it back.
	ReasonHealthGateFailed = "HealthGateFailed"

	// HealthGatesHold begins the message of a WAITING consumer whose soak
	// the health gates hold (they cannot judge yet): statusd shows it, and
	// the gate reads it back.
	HealthGatesHold = "the health gates hold the soak: "

	// NoRestartNeeded begins the message of a consumer that was not
	// restarted onto a new file because what it runs would not change:
	// statusd shows it in the soak's condition.
	NoRestartNeeded = "no restart needed: "

	// ReasonNodeFilesUnreadable is the early error of a node whose own
	// kubelet files (its --config file, its other drop-ins) cannot be read
	// or decoded, or found (the kubelet's command line does not say, or
	// names a file not mounted into the agent): it says nothing of the
	// config, so nothing rolls back and the caller retries.
	ReasonNodeFilesUnreadable = "NodeFilesUnreadable"

	// ReasonRefusedByPolicy is the late error of a config the node's own
	// field policy refuses (a kubelet field that grants access or runs
	// code, or validator: none without the opt-in): the agent holds it
	// from its own flags, so a reconciler that let it through cannot
	// lift it.
	ReasonRefusedByPolicy = "RefusedByPolicy"

	// ReasonKubeletNoConfigDir is the early error of a node whose kubelet
	// runs without --config-dir: it reads no drop-in, so checkpointd writes
	// none, and says the flag to add. It clears the error itself once the
	// kubelet has one and the drop-in is in place.
	ReasonKubeletNoConfigDir = "KubeletNoConfigDir"

	// ReasonDrainFailed is the early error of a node whose drain before a
	// change (a kubelet field that needs one, or the NodeConfig's
	// spec.rollout.drain) did not finish within its bound: its message
	// names the pods left. The node is uncordoned, its kubelet not
	// restarted, nothing rolled back; the drain is tried again later.
	ReasonDrainFailed = "DrainFailed"

	// ReasonChangeRefused is the late error of a config that changes a
	// kubelet field the agent refuses to change on a running node (the
	// cgroup layout: docs/disruption.md): nothing is written.
	ReasonChangeRefused = "ChangeRefused"
)

// NodeClears reports whether an early error of reason is checkpointd's
// own to clear, once what it could not do is done (the file written): a
// caller that cleared it would only see it come back at the next try.
func NodeClears(reason string) bool {
	return reason == ReasonWriteFailed || reason == ReasonKubeletNoConfigDir
}

// Status projects r onto the NodeConfigStatus a node reports, so that
// statusd and the reconciler report the same status from the same records.
func Status(r *nodeconfigv1.Records) *nodeconfigv1.NodeConfigStatus {
	return &nodeconfigv1.NodeConfigStatus{
		Assigned:      r.GetAssigned().GetSource(),
		Active:        r.GetActive().GetSource(),
		LastKnownGood: r.GetLastKnownGood().GetSource(),
		Error:         r.GetError().GetError().GetMessage(),
	}
}

// Describe names the config src in a message a user reads; nil is the
// local default, since a node with nothing assigned runs that.
func Describe(src *nodeconfigv1.ConfigSource) string {
	if src == nil {
		return "the local default"
	}
	return fmt.Sprintf("ConfigMap %s/%s key %s (resourceVersion %s)", src.GetNamespace(), src.GetName(), src.GetKey(), src.GetResourceVersion())
}

// SameSource reports whether a and b name the same config (nil: the local
// default). It compares every field, uid and resourceVersion included,
// because a new version of a ConfigMap, or a recreated one, is a new config
// with a trial of its own. Field by field: the reconciler asks it of every
// node it selects, and proto.Equal's reflection costs thirty times more.
func SameSource(a, b *nodeconfigv1.ConfigSource) bool {
	return a.GetUid() == b.GetUid() && a.GetResourceVersion() == b.GetResourceVersion() && a.GetKey() == b.GetKey() &&
		a.GetName() == b.GetName() && a.GetNamespace() == b.GetNamespace() && (a == nil) == (b == nil)
}

// FailedLate returns r's mark of src judged by v: the version failed late
// there, so it is never activated again. Nil if it did not.
func FailedLate(r *nodeconfigv1.Records, src *nodeconfigv1.ConfigSource, v nodeconfigv1.Validator) *nodeconfigv1.FailedVersion {
	for _, f := range r.GetFailed() {
		if f.GetValidator() == v && SameSource(f.GetSource(), src) {
			return f
		}
	}
	return nil
}

// RollbackUnfinished reports whether a rollback of the assigned version is
// not done: the version is marked as failed late, yet it, or one that
// soaked before it, is active rather than last-known-good (a kill or a
// failed write came between the verdict and the switch), so the rollback
// must be finished before anything else moves.
func RollbackUnfinished(r *nodeconfigv1.Records) bool {
	a := r.GetAssigned()
	if a.GetSource() == nil || FailedLate(r, a.GetSource(), a.GetValidator()) == nil {
		return false
	}
	active := r.GetActive().GetSource()
	return SameSource(active, a.GetSource()) || !SameSource(active, r.GetLastKnownGood().GetSource())
}
