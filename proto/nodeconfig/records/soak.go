package records

import (
	"time"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// The soak: an assigned config, once active, is on trial for its soak
// before it becomes last-known-good, and so is the local default after a
// reset. Each moment is computed from the durable records alone, so that
// every service, and a restarted one, agrees on it.

// SoakStart is when the active config's trial began, from durable records
// so that no restart resets it: where the node gates on its consumer, when
// the consumer became healthy on it, less the time it was seen healthy on
// it before (so only healthy time counts); otherwise when it became
// active. Zero while the trial has not begun (nothing active, or the
// consumer is still restarting or not yet healthy).
func SoakStart(r *nodeconfigv1.Records) time.Time {
	active := r.GetActive()
	if active == nil || active.GetWrittenAt() == nil {
		return time.Time{}
	}
	if c := r.GetConsumer(); c != nil {
		if !SameSource(c.GetSource(), active.GetSource()) || c.GetPhase() != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY || c.GetSince() == nil {
			return time.Time{}
		}
		return c.GetSince().AsTime().Add(-c.GetHealthyBefore().AsDuration())
	}
	return active.GetWrittenAt().AsTime()
}

// SoakEnd is when the assigned config's trial ends: SoakStart plus its
// soak. Zero while the trial has not begun, as no end can be known then.
func SoakEnd(r *nodeconfigv1.Records) time.Time {
	start := SoakStart(r)
	if start.IsZero() {
		return time.Time{}
	}
	return start.Add(time.Duration(r.GetAssigned().GetSoakSeconds()) * time.Second)
}

// SoakOver reports whether the active assigned config has soaked long
// enough to become last-known-good at now.
func SoakOver(r *nodeconfigv1.Records, now time.Time) bool {
	end := SoakEnd(r)
	return Soaking(r) && !end.IsZero() && !now.Before(end)
}

// Soaking reports whether the assigned config is active but not yet
// last-known-good: it is on trial, unless it already failed late (then it
// is rolling back, not soaking).
func Soaking(r *nodeconfigv1.Records) bool {
	a := r.GetAssigned().GetSource()
	return a != nil && SameSource(a, r.GetActive().GetSource()) && !SameSource(a, r.GetLastKnownGood().GetSource()) &&
		r.GetError().GetError().GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE
}

// ResetSoakEnd is when the node's last reset stops counting as a change on
// trial: its soak measured from the reset, or from the moment the consumer
// became healthy on the local default where the node gates on it. Zero
// when the soak has not begun (the consumer is not healthy yet) or there
// is none.
func ResetSoakEnd(r *nodeconfigv1.Records) time.Time {
	reset := r.GetLastReset()
	if reset.GetSoakSeconds() <= 0 || reset.GetAt() == nil {
		return time.Time{}
	}
	start := reset.GetAt().AsTime()
	if c := r.GetConsumer(); c != nil {
		if c.GetSource() != nil || c.GetPhase() != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY || c.GetSince() == nil {
			return time.Time{}
		}
		start = c.GetSince().AsTime()
	}
	return start.Add(time.Duration(reset.GetSoakSeconds()) * time.Second)
}

// ResetSoaking reports whether the node's last reset is still on trial at
// now: it soaks, nothing was assigned since, and its soak has not ended
// (or not begun, so its end is not known yet).
func ResetSoaking(r *nodeconfigv1.Records, now time.Time) bool {
	if r.GetLastReset().GetSoakSeconds() <= 0 || r.GetAssigned() != nil {
		return false
	}
	end := ResetSoakEnd(r)
	return end.IsZero() || now.Before(end)
}
