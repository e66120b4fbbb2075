package lifecycle

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// keptFailedVersions bounds the late marks a node keeps: enough for a
// version to be tried again only after several others failed since.
const keptFailedVersions = 8

// markFailed records f, replacing an older mark of the same version and
// dropping the oldest past keptFailedVersions.
func markFailed(r *nodeconfigv1.Records, f *nodeconfigv1.FailedVersion) {
	kept := r.Failed[:0]
	for _, old := range r.Failed {
		if old.GetValidator() != f.GetValidator() || !proto.Equal(old.GetSource(), f.GetSource()) {
			kept = append(kept, old)
		}
	}
	kept = append(kept, f)
	if len(kept) > keptFailedVersions {
		kept = kept[len(kept)-keptFailedVersions:]
	}
	r.Failed = kept
}

// keepLateErrorLocked makes the error record say why the assigned version,
// marked f, is not active; the active config and the file stay as they are.
func (n *Node) keepLateErrorLocked(f *nodeconfigv1.FailedVersion) (*nodeconfigv1.Records, error) {
	return n.store.UpdateRecords(func(r *nodeconfigv1.Records, now *timestamppb.Timestamp) (bool, error) {
		if r.GetError().GetError().GetPhase() == nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE {
			return false, nil
		}
		r.Error = &nodeconfigv1.ErrorRecord{Error: f.GetError(), WrittenAt: now}
		return true, nil
	})
}
