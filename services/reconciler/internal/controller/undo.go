package controller

import (
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/history"
	"nodeconfig.io/services/reconciler/internal/policy"
	"nodeconfig.io/services/reconciler/internal/rollout"
)

// undoTarget is what nc rolls out while the version src halts and its
// spec.rollout.onHalt is Undo: the newest revision before the halted one
// that was promoted everywhere (the history says so, or every node runs it
// as last-known-good). Nil when nothing is undone: src is not
// halted, onHalt is Hold, or there is no history or no such revision (a
// halt then holds). It is read from the halt and the history alone, both
// durable, so a new leader undoes the same.
func (c *Controller) undoTarget(nc *v1alpha1.NodeConfig, src *nodeconfigv1.ConfigSource) *history.Pinned {
	if c.o.History == nil || src == nil || nc.Spec.Rollout.OnHalt == v1alpha1.OnHaltHold {
		return nil
	}
	if !c.book.Halted(nc, rollout.VersionOf(src, validators[nc.Spec.Validator])) {
		return nil
	}
	revs, err := c.o.History.Of(nc)
	if err != nil {
		return nil
	}
	before := len(revs)
	if i := slices.IndexFunc(revs, func(cr *appsv1.ControllerRevision) bool { return revisionIs(cr, nc, src) }); i >= 0 {
		before = i
	}
	for _, cr := range slices.Backward(revs[:before]) {
		p, err := c.o.History.Get(nc, cr.Revision)
		if err != nil {
			return nil
		}
		// The history notes a promotion only when it sees one; the nodes'
		// own last-known-good says it too, when the history looked at a
		// stale view of them (a new version came before the promotion was
		// read).
		if cr.Annotations[v1alpha1.AnnotationRolloutOutcome] == v1alpha1.OutcomePromoted || c.promotedNow(nc, p) {
			return p
		}
	}
	return nil
}

// revisionIs says whether cr is the revision of src, the version nc
// assigns: the revision spec.source.revision pins, or the one read from
// that ConfigMap version.
func revisionIs(cr *appsv1.ControllerRevision, nc *v1alpha1.NodeConfig, src *nodeconfigv1.ConfigSource) bool {
	if n := nc.Spec.Source.Revision; n != nil {
		return cr.Revision == *n
	}
	of := v1alpha1.RevisionSource{UID: src.GetUid(), ResourceVersion: src.GetResourceVersion(), Key: src.GetKey()}
	return cr.Annotations[v1alpha1.AnnotationRevisionOf] == of.Version()
}

// runsAgain says whether node runs revision p as its active and
// last-known-good config, under the revision's own name or the ConfigMap
// version it was read from (by the records last read from it): undone, or
// never moved off it.
func (c *Controller) runsAgain(node string, p *history.Pinned) bool {
	c.mu.Lock()
	n := c.nodes[node]
	c.mu.Unlock()
	return n != nil && policy.RunsOneOf(n.Records, p.Source, readFrom(p))
}

// readFrom is the ConfigMap version revision p was read from, as the
// nodes that ran it then name it.
func readFrom(p *history.Pinned) *nodeconfigv1.ConfigSource {
	d := p.Data.Source
	return &nodeconfigv1.ConfigSource{Namespace: d.Namespace, Name: d.Name, Uid: d.UID, ResourceVersion: d.ResourceVersion, Key: d.Key}
}

// undoProgress says how far the undo of nc's halted version is, for its
// status: how many of its selected nodes run the revision again, and which
// do not yet (left).
func (c *Controller) undoProgress(p *history.Pinned, selected []string) (reason, message string, left []string) {
	for _, name := range selected {
		if !c.runsAgain(name, p) {
			left = append(left, name)
		}
	}
	reason = v1alpha1.ReasonUndoingHaltedVersion
	if len(left) == 0 {
		reason = v1alpha1.ReasonHaltedVersionUndone
	}
	return reason, fmt.Sprintf("spec.rollout.onHalt Undo: %d of %d selected node(s) run revision %d again (%s, the last promoted everywhere before the halted version), paced by maxInTrial",
		len(selected)-len(left), len(selected), p.Revision.Revision, p.Data.Source), left
}
