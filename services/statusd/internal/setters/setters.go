// Package setters computes the parts of a Node that statusd owns, after the
// kubelet's nodestatus package: each Setter edits a Node in place and closes
// over narrow functions rather than over statusd itself, so each can be
// tested with a three-line fake. Setters have no side effects.
package setters

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
)

// Setter modifies the node in place and returns an error if it failed.
type Setter func(ctx context.Context, node *corev1.Node) error

// Named is a Setter with the name ListSetters shows.
type Named struct {
	Name    string
	Builtin bool
	Set     Setter
}

// RecordsFunc returns the node's current records, or an error when
// checkpointd cannot be reached. Typically recordwatch.Follower.Records.
type RecordsFunc func() (*nodeconfigv1.Records, error)

// ConfigStatus writes the NodeConfigStatus to the nodeconfig.io/config-status
// annotation (v1alpha1.EncodeNodeConfigStatus: JSON, in the shape of the
// core API's NodeConfigStatus).
// While checkpointd is unreachable it leaves the last reported status alone:
// it is still the best knowledge anyone has.
func ConfigStatus(read RecordsFunc) Setter {
	return func(_ context.Context, node *corev1.Node) error {
		recs, err := read()
		if err != nil {
			return nil
		}
		value, err := v1alpha1.EncodeNodeConfigStatus(CoreStatus(records.Status(recs)))
		if err != nil {
			return err
		}
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		node.Annotations[v1alpha1.NodeAnnotationConfigStatus] = value
		return nil
	}
}

// CoreStatus converts to the core API type.
func CoreStatus(s *nodeconfigv1.NodeConfigStatus) corev1.NodeConfigStatus {
	return corev1.NodeConfigStatus{
		Assigned:      coreSource(s.GetAssigned()),
		Active:        coreSource(s.GetActive()),
		LastKnownGood: coreSource(s.GetLastKnownGood()),
		Error:         s.GetError(),
	}
}

func coreSource(src *nodeconfigv1.ConfigSource) *corev1.NodeConfigSource {
	if src == nil {
		return nil
	}
	return &corev1.NodeConfigSource{ConfigMap: &corev1.ConfigMapNodeConfigSource{
		Namespace:        src.GetNamespace(),
		Name:             src.GetName(),
		UID:              types.UID(src.GetUid()),
		ResourceVersion:  src.GetResourceVersion(),
		KubeletConfigKey: src.GetKey(),
	}}
}

// NodeConfigReady sets the NodeConfigReady condition from the records: one
// reason per lifecycle state (v1alpha1.NodeReason...), or the reason of the
// records' error, and a message that is never empty.
func NodeConfigReady(read RecordsFunc) Setter {
	return func(_ context.Context, node *corev1.Node) error {
		SetCondition(node, ReadyCondition(read))
		return nil
	}
}

// ReadyCondition computes the NodeConfigReady condition.
func ReadyCondition(read RecordsFunc) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.NodeConditionConfigReady}
	recs, err := read()
	if err != nil {
		c.Status, c.Reason = metav1.ConditionUnknown, v1alpha1.NodeReasonCheckpointdUnavailable
		c.Message = fmt.Sprintf("cannot read the node's config records from checkpointd: %v", err)
		return c
	}
	assigned := recs.GetAssigned()
	cfgErr := recs.GetError().GetError()
	switch {
	case cfgErr.GetPhase() == nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE:
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.NodeReasonRolledBack
		if r := cfgErr.GetReason(); r == records.ReasonConsumerUnhealthy || r == records.ReasonStartGuardFellBack || r == records.ReasonHealthGateFailed {
			// The kubelet's own failure on the config: its reason says so.
			c.Reason = r
		}
		c.Message = fmt.Sprintf("%s; rolled back to %s", cfgErr.GetMessage(), records.Describe(recs.GetActive().GetSource()))
	case cfgErr.GetPhase() == nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY:
		c.Status, c.Reason = metav1.ConditionFalse, cfgErr.GetReason()
		c.Message = fmt.Sprintf("%s; retrying, still using %s", cfgErr.GetMessage(), records.Describe(recs.GetActive().GetSource()))
	case assigned == nil:
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.NodeReasonLocalDefault
		c.Message = "no config is assigned; the node uses its local default"
	case recs.GetDrain().GetPhase() == nodeconfigv1.DrainPhase_DRAIN_PHASE_DRAINING && records.SameSource(recs.GetDrain().GetSource(), assigned.GetSource()):
		d := recs.GetDrain()
		c.Status, c.Reason = metav1.ConditionUnknown, v1alpha1.NodeReasonDraining
		c.Message = fmt.Sprintf("%s needs a drain first (%s): the node is cordoned and its pods evicted since %s, for at most %ds; nothing is written yet",
			records.Describe(assigned.GetSource()), d.GetWhy(), d.GetSince().AsTime().UTC().Format(time.RFC3339), d.GetTimeoutSeconds())
	case !records.SameSource(assigned.GetSource(), recs.GetActive().GetSource()):
		c.Status, c.Reason = metav1.ConditionUnknown, v1alpha1.NodeReasonActivating
		c.Message = fmt.Sprintf("%s is assigned and about to be activated", records.Describe(assigned.GetSource()))
	case records.Soaking(recs) && records.SoakStart(recs).IsZero():
		c.Status, c.Reason = metav1.ConditionUnknown, v1alpha1.NodeReasonRestarting
		c.Message = fmt.Sprintf("%s is active; restarting the consumer onto it", records.Describe(assigned.GetSource()))
		if cr := recs.GetConsumer(); cr.GetPhase() == nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING && records.SameSource(cr.GetSource(), assigned.GetSource()) {
			c.Reason = v1alpha1.NodeReasonWaitingForHealth
			c.Message = fmt.Sprintf("%s is active; the consumer was restarted onto it at %s and is not healthy yet; the soak begins when it is",
				records.Describe(assigned.GetSource()), cr.GetSince().AsTime().UTC().Format(time.RFC3339))
			if strings.HasPrefix(cr.GetMessage(), records.HealthGatesHold) {
				c.Message = fmt.Sprintf("%s is active and the kubelet healthy on it; %s", records.Describe(assigned.GetSource()), cr.GetMessage())
			}
		}
	case recs.GetConsumer().GetPhase() == nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_UNHEALTHY &&
		records.SameSource(recs.GetConsumer().GetSource(), recs.GetActive().GetSource()):
		c.Status, c.Reason = metav1.ConditionFalse, records.ReasonConsumerUnhealthy
		c.Message = fmt.Sprintf("%s; nothing better to roll back to", recs.GetConsumer().GetMessage())
	case records.Soaking(recs):
		// The end time, not a countdown: a countdown would change the Node
		// on every sync and turn the status into a heartbeat.
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.NodeReasonSoaking
		c.Message = fmt.Sprintf("%s is active and on trial until %s (%ds soak); it becomes last-known-good then if still active",
			records.Describe(assigned.GetSource()), records.SoakEnd(recs).UTC().Format(time.RFC3339), assigned.GetSoakSeconds())
		if cr := recs.GetConsumer(); strings.HasPrefix(cr.GetMessage(), records.NoRestartNeeded) {
			c.Message += "; " + cr.GetMessage()
		}
	default:
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.NodeReasonActive
		c.Message = fmt.Sprintf("%s is active and last-known-good", records.Describe(assigned.GetSource()))
	}
	return c
}

// SetCondition sets a Node condition with metav1.Condition semantics
// (meta.SetStatusCondition): lastTransitionTime moves only when the status
// changes, and no heartbeat time is ever written.
func SetCondition(node *corev1.Node, want metav1.Condition) {
	idx := -1
	var conds []metav1.Condition
	for i, nc := range node.Status.Conditions {
		if string(nc.Type) == want.Type {
			idx = i
			conds = append(conds, metav1.Condition{
				Type: string(nc.Type), Status: metav1.ConditionStatus(nc.Status),
				Reason: nc.Reason, Message: nc.Message, LastTransitionTime: nc.LastTransitionTime,
			})
		}
	}
	changed := meta.SetStatusCondition(&conds, want)
	got := conds[0]
	nc := corev1.NodeCondition{
		Type: corev1.NodeConditionType(got.Type), Status: corev1.ConditionStatus(got.Status),
		Reason: got.Reason, Message: got.Message, LastTransitionTime: got.LastTransitionTime,
	}
	// lastHeartbeatTime is when statusd last changed the condition: it moves
	// only with a real change, never on a timer (KEP-1623: no heartbeats in
	// conditions), and spares kubectl describe a year-one date.
	if idx >= 0 {
		nc.LastHeartbeatTime = node.Status.Conditions[idx].LastHeartbeatTime
	}
	if changed || nc.LastHeartbeatTime.IsZero() {
		nc.LastHeartbeatTime = metav1.Now()
	}
	if idx < 0 {
		node.Status.Conditions = append(node.Status.Conditions, nc)
		return
	}
	node.Status.Conditions[idx] = nc
}

// RemoveCondition drops a condition type from the node.
func RemoveCondition(node *corev1.Node, conditionType string) {
	out := node.Status.Conditions[:0]
	for _, c := range node.Status.Conditions {
		if string(c.Type) != conditionType {
			out = append(out, c)
		}
	}
	node.Status.Conditions = out
}

// Activating reports the in-between state of a config assigned but not yet
// active (and not failed): checkpointd activates right after assigning, so
// it is about to pass by itself.
func Activating(read RecordsFunc) bool {
	return ReadyCondition(read).Reason == v1alpha1.NodeReasonActivating
}
