package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
)

// A NodeConfig's history: each version it rolls out is kept as an apps/v1
// ControllerRevision (as a DaemonSet keeps its own) in the reconciler's
// namespace, owned by the NodeConfig and labelled with its name, numbered
// 1, 2, 3... The reconciler writes them; kubectl nodeconfig history reads
// them, and undo sets spec.source.revision to one of them.
const (
	// LabelHistoryOf names the NodeConfig whose history a revision is.
	LabelHistoryOf = "nodeconfig.io/nodeconfig"
	// AnnotationRolloutStarted is when the latest rollout of a revision
	// started (RFC 3339, nanoseconds): the revision whose rollout started
	// last is the NodeConfig's current one.
	AnnotationRolloutStarted = "nodeconfig.io/rollout-started"
	// AnnotationRolloutOutcome is how that rollout went: one of the
	// Outcome values.
	AnnotationRolloutOutcome = "nodeconfig.io/rollout-outcome"
	// AnnotationRevisionOf is the ConfigMap version the revision was read
	// from, as "uid/resourceVersion/key": what finds a version's revision
	// without decoding every revision's data.
	AnnotationRevisionOf = "nodeconfig.io/revision-of"
)

// Outcomes of a revision's rollout.
const (
	// OutcomeRollingOut: the revision is the current one and not on every
	// selected node yet.
	OutcomeRollingOut = "RollingOut"
	// OutcomePromoted: every selected node ran it as last-known-good.
	OutcomePromoted = "Promoted"
	// OutcomeHalted: maxFailures rollbacks halted its rollout.
	OutcomeHalted = "Halted"
	// OutcomeRefused: the reconciler's validator refused it; no node got it.
	OutcomeRefused = "Refused"
	// OutcomeSuperseded: another revision became current before it ended.
	OutcomeSuperseded = "Superseded"
)

// RevisionData is what a revision's data holds (JSON): the payload — the
// bytes of the ConfigMap key — its digest, and the ConfigMap version it was
// read from.
type RevisionData struct {
	// Payload is the value of the ConfigMap key.
	Payload []byte `json:"payload"`
	// SHA256 is the hex digest of Payload.
	SHA256 string `json:"sha256"`
	// Source is the ConfigMap version Payload was read from.
	Source RevisionSource `json:"source"`
}

// RevisionSource is the ConfigMap version a revision was read from.
type RevisionSource struct {
	Namespace       string `json:"namespace"`
	Name            string `json:"name"`
	UID             string `json:"uid"`
	ResourceVersion string `json:"resourceVersion"`
	Key             string `json:"key"`
}

// Version is the source as AnnotationRevisionOf holds it.
func (s RevisionSource) Version() string { return s.UID + "/" + s.ResourceVersion + "/" + s.Key }

// String is the source as the history shows it.
func (s RevisionSource) String() string {
	return fmt.Sprintf("%s/%s key %s (resourceVersion %s)", s.Namespace, s.Name, s.Key, s.ResourceVersion)
}

// NewRevisionData is the data of a revision of payload read from source.
func NewRevisionData(payload []byte, source RevisionSource) RevisionData {
	sum := sha256.Sum256(payload)
	return RevisionData{Payload: payload, SHA256: hex.EncodeToString(sum[:]), Source: source}
}

// DecodeRevision reads a revision's data and checks its digest: a revision
// whose bytes do not match it is never rolled out.
func DecodeRevision(cr *appsv1.ControllerRevision) (RevisionData, error) {
	var d RevisionData
	if err := json.Unmarshal(cr.Data.Raw, &d); err != nil {
		return RevisionData{}, fmt.Errorf("revision %d (ControllerRevision %s/%s): %w", cr.Revision, cr.Namespace, cr.Name, err)
	}
	if sum := sha256.Sum256(d.Payload); hex.EncodeToString(sum[:]) != d.SHA256 {
		return RevisionData{}, fmt.Errorf("revision %d (ControllerRevision %s/%s): its payload does not match its sha256 %s", cr.Revision, cr.Namespace, cr.Name, d.SHA256)
	}
	return d, nil
}

// RevisionOf says whether cr is a revision of nc: labelled with its name
// and owned by it (not by an earlier NodeConfig of the same name whose
// revisions the garbage collector has not removed yet).
func RevisionOf(cr *appsv1.ControllerRevision, nc *NodeConfig) bool {
	if cr.Labels[LabelHistoryOf] != nc.Name {
		return false
	}
	for _, ref := range cr.OwnerReferences {
		if ref.UID == nc.UID && ref.Kind == "NodeConfig" {
			return true
		}
	}
	return false
}

// RevisionStarted is when the latest rollout of cr started; zero if it
// does not say.
func RevisionStarted(cr *appsv1.ControllerRevision) time.Time {
	t, err := time.Parse(time.RFC3339Nano, cr.Annotations[AnnotationRolloutStarted])
	if err != nil {
		return time.Time{}
	}
	return t
}

// CurrentRevision is the revision among revs whose rollout started last
// (the highest number among equals); nil for none.
func CurrentRevision(revs []*appsv1.ControllerRevision) *appsv1.ControllerRevision {
	var cur *appsv1.ControllerRevision
	for _, r := range revs {
		if cur == nil {
			cur = r
			continue
		}
		rs, cs := RevisionStarted(r), RevisionStarted(cur)
		if rs.After(cs) || (rs.Equal(cs) && r.Revision > cur.Revision) {
			cur = r
		}
	}
	return cur
}
