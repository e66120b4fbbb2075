package nodeconfigv1

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
)

// This file is written by hand: small meanings of the contract that every
// service needs the same way.

// ReasonWriteFailed is the early error checkpointd records when it cannot
// write the target file (a read-only or full disk): nothing is rolled back,
// the reconciler retries, and checkpointd clears it once a write succeeds.
const ReasonWriteFailed = "WriteFailed"

// ReasonConsumerUnhealthy is the late error of a config the node's consumer
// (the kubelet) does not run healthy: checkpointd records it when it rolls
// back, statusd makes it the condition's reason.
const ReasonConsumerUnhealthy = "ConsumerUnhealthy"

// ReasonStartGuardFellBack is the late error of a config the kubelet could
// not start on while no agent ran: the host-side start guard put
// last-known-good back, and the agent records it at its start.
const ReasonStartGuardFellBack = "StartGuardFellBack"

// Status projects the records onto the NodeConfigStatus a node reports.
func (r *Records) Status() *NodeConfigStatus {
	return &NodeConfigStatus{
		Assigned:      r.GetAssigned().GetSource(),
		Active:        r.GetActive().GetSource(),
		LastKnownGood: r.GetLastKnownGood().GetSource(),
		Error:         r.GetError().GetError().GetMessage(),
	}
}

// Describe names the config in a message a user reads; nil is the local
// default.
func (s *ConfigSource) Describe() string {
	if s == nil {
		return "the local default"
	}
	return fmt.Sprintf("ConfigMap %s/%s key %s (resourceVersion %s)", s.GetNamespace(), s.GetName(), s.GetKey(), s.GetResourceVersion())
}

// SameSource reports whether a and b name the same config (nil: the local
// default).
func SameSource(a, b *ConfigSource) bool { return proto.Equal(a, b) }

// SoakStart is when the active config's trial began, from durable records
// so that no restart resets it: where the node gates on its consumer, when
// the consumer became healthy on it, less the time it was seen healthy on
// it before (so only healthy time counts); otherwise when it became active. Zero
// while the trial has not begun (nothing active, or the consumer is still
// restarting or not yet healthy).
func (r *Records) SoakStart() time.Time {
	active := r.GetActive()
	if active == nil || active.GetWrittenAt() == nil {
		return time.Time{}
	}
	if c := r.GetConsumer(); c != nil {
		if !SameSource(c.GetSource(), active.GetSource()) || c.GetPhase() != ConsumerPhase_CONSUMER_PHASE_HEALTHY || c.GetSince() == nil {
			return time.Time{}
		}
		return c.GetSince().AsTime().Add(-c.GetHealthyBefore().AsDuration())
	}
	return active.GetWrittenAt().AsTime()
}

// SoakEnd is when the assigned config's trial ends: SoakStart plus its soak.
// Zero while the trial has not begun.
func (r *Records) SoakEnd() time.Time {
	start := r.SoakStart()
	if start.IsZero() {
		return time.Time{}
	}
	return start.Add(time.Duration(r.GetAssigned().GetSoakSeconds()) * time.Second)
}

// SoakOver reports whether the active assigned config has soaked long
// enough to become last-known-good at now.
func (r *Records) SoakOver(now time.Time) bool {
	end := r.SoakEnd()
	return r.Soaking() && !end.IsZero() && !now.Before(end)
}

// Soaking reports whether the assigned config is active but not yet
// last-known-good.
func (r *Records) Soaking() bool {
	a := r.GetAssigned().GetSource()
	return a != nil && SameSource(a, r.GetActive().GetSource()) && !SameSource(a, r.GetLastKnownGood().GetSource()) &&
		r.GetError().GetError().GetPhase() != ErrorPhase_ERROR_PHASE_LATE
}

// ResetSoakEnd is when the node's last reset stops counting as a change on
// trial: its soak measured from the reset, or from the moment the consumer
// became healthy on the local default where the node gates on it. Zero when
// the soak has not begun (the consumer is not healthy yet) or there is none.
func (r *Records) ResetSoakEnd() time.Time {
	reset := r.GetLastReset()
	if reset.GetSoakSeconds() <= 0 || reset.GetAt() == nil {
		return time.Time{}
	}
	start := reset.GetAt().AsTime()
	if c := r.GetConsumer(); c != nil {
		if c.GetSource() != nil || c.GetPhase() != ConsumerPhase_CONSUMER_PHASE_HEALTHY || c.GetSince() == nil {
			return time.Time{}
		}
		start = c.GetSince().AsTime()
	}
	return start.Add(time.Duration(reset.GetSoakSeconds()) * time.Second)
}

// ResetSoaking reports whether the node's last reset is still on trial at
// now: it soaks, nothing was assigned since, and its soak has not ended.
func (r *Records) ResetSoaking(now time.Time) bool {
	if r.GetLastReset().GetSoakSeconds() <= 0 || r.GetAssigned() != nil {
		return false
	}
	end := r.ResetSoakEnd()
	return end.IsZero() || now.Before(end)
}

// FailedLate returns the node's mark of src judged by v: the version failed
// late there, so it is never activated again. Nil if it did not.
func (r *Records) FailedLate(src *ConfigSource, v Validator) *FailedVersion {
	for _, f := range r.GetFailed() {
		if f.GetValidator() == v && SameSource(f.GetSource(), src) {
			return f
		}
	}
	return nil
}

// RollbackUnfinished says whether a rollback of the assigned version is not
// done: the version is marked as failed late, yet it, or one that soaked
// before it, is active rather than last-known-good (a kill or a failed
// write came between the verdict and the switch).
func (r *Records) RollbackUnfinished() bool {
	a := r.GetAssigned()
	if a.GetSource() == nil || r.FailedLate(a.GetSource(), a.GetValidator()) == nil {
		return false
	}
	active := r.GetActive().GetSource()
	return SameSource(active, a.GetSource()) || !SameSource(active, r.GetLastKnownGood().GetSource())
}
