package nodeconfigv1

import (
	"time"

	"google.golang.org/protobuf/proto"
)

// This file is written by hand: small meanings of the contract that every
// service needs the same way.

// Status projects the records onto the NodeConfigStatus a node reports.
func (r *Records) Status() *NodeConfigStatus {
	return &NodeConfigStatus{
		Assigned:      r.GetAssigned().GetSource(),
		Active:        r.GetActive().GetSource(),
		LastKnownGood: r.GetLastKnownGood().GetSource(),
		Error:         r.GetError().GetError().GetMessage(),
	}
}

// SameSource reports whether a and b name the same config (nil: the local
// default).
func SameSource(a, b *ConfigSource) bool { return proto.Equal(a, b) }

// SoakEnd is when the assigned config's trial ends: the durable write time
// of the assigned record plus its soak. Zero when nothing is assigned.
func (r *Records) SoakEnd() time.Time {
	a := r.GetAssigned()
	if a == nil || a.GetWrittenAt() == nil {
		return time.Time{}
	}
	return a.GetWrittenAt().AsTime().Add(time.Duration(a.GetSoakSeconds()) * time.Second)
}

// Soaking reports whether the assigned config is active but not yet
// last-known-good.
func (r *Records) Soaking() bool {
	a := r.GetAssigned().GetSource()
	return a != nil && SameSource(a, r.GetActive().GetSource()) && !SameSource(a, r.GetLastKnownGood().GetSource()) &&
		r.GetError().GetError().GetPhase() != ErrorPhase_ERROR_PHASE_LATE
}
