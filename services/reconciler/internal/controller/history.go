package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/history"
	"nodeconfig.io/services/reconciler/internal/pacing"
	"nodeconfig.io/services/reconciler/internal/rollout"
)

// resolve is the version nc assigns now, from the caches: the ConfigMap
// key's current version, or the revision spec.source.revision pins. The
// source is pinned for the nodes, and data holds its payload under its
// key.
func (c *Controller) resolve(nc *v1alpha1.NodeConfig) (*nodeconfigv1.ConfigSource, map[string]string, error) {
	if n := nc.Spec.Source.Revision; n != nil {
		return c.revision(nc, *n)
	}
	src, data, err := c.pinned(nc.Spec.Source.ConfigMap)
	if err != nil {
		return nil, nil, err
	}
	if same := c.sameBytes(nc, src, data[src.Key]); same != nil {
		return same, map[string]string{src.Key: data[src.Key]}, nil
	}
	return src, data, nil
}

// sameBytes is the ConfigMap version the newest revision of nc was read
// from, when the key's bytes at src are that revision's, to the byte or, for
// the kubelet, as the same YAML document (keys reordered, comments,
// quoting: the kubelet reads one document into typed fields; another
// consumer may read the bytes, later documents or YAML 1.2): an edit of
// another key, of a label, or of nothing the nodes read is no new version,
// so it starts no trial and restarts no kubelet. Nil otherwise, or without
// a history to tell.
func (c *Controller) sameBytes(nc *v1alpha1.NodeConfig, src *nodeconfigv1.ConfigSource, payload string) *nodeconfigv1.ConfigSource {
	if c.o.History == nil {
		return nil
	}
	revs, err := c.o.History.Of(nc)
	if err != nil || len(revs) == 0 {
		return nil
	}
	p, err := c.o.History.Get(nc, revs[len(revs)-1].Revision)
	if err != nil {
		return nil
	}
	d := p.Data.Source
	if d.UID != src.GetUid() || d.Key != src.GetKey() || d.Namespace != src.GetNamespace() || d.Name != src.GetName() || d.ResourceVersion == src.GetResourceVersion() {
		return nil
	}
	if p.Data.SHA256 != v1alpha1.NewRevisionData([]byte(payload), d).SHA256 && (nc.Spec.Validator != "kubelet" || !sameDocument(p.Data.Payload, []byte(payload))) {
		return nil
	}
	return &nodeconfigv1.ConfigSource{Namespace: d.Namespace, Name: d.Name, Uid: d.UID, ResourceVersion: d.ResourceVersion, Key: d.Key}
}

// revision resolves revision n of nc's history; a revision that is not
// kept (or whose bytes fail their digest) is an error that says so.
func (c *Controller) revision(nc *v1alpha1.NodeConfig, n int64) (*nodeconfigv1.ConfigSource, map[string]string, error) {
	if c.o.History == nil {
		return nil, nil, fmt.Errorf("spec.source.revision %d: this reconciler keeps no history", n)
	}
	p, err := c.o.History.Get(nc, n)
	if err != nil {
		return nil, nil, fmt.Errorf("spec.source.revision: %w", err)
	}
	return p.Source, p.NodeData, nil
}

// syncHistory keeps nc's history in step with what it rolls out (st is
// the status just computed). Nothing is noted while the version cannot be
// read.
func (c *Controller) syncHistory(ctx context.Context, nc *v1alpha1.NodeConfig, st v1alpha1.NodeConfigStatus) error {
	if c.o.History == nil || rollout.Lets(nc) {
		return nil
	}
	src, data, err := c.resolve(nc)
	if err != nil {
		return nil
	}
	r := history.Rollout{}
	if n := nc.Spec.Source.Revision; n != nil {
		r.Pinned = *n
	} else {
		r.Payload = []byte(data[src.Key])
		r.Source = v1alpha1.RevisionSource{Namespace: src.Namespace, Name: src.Name, UID: src.Uid, ResourceVersion: src.ResourceVersion, Key: src.Key}
	}
	v := rollout.VersionOf(src, validators[nc.Spec.Validator])
	switch {
	case c.knownRefusal(v) != "":
		r.Outcome = v1alpha1.OutcomeRefused
	case pacing.Halted(rollout.Failures(st.RolledBackVersions, v), c.book.Policy(nc).MaxFailures):
		r.Outcome = v1alpha1.OutcomeHalted
	case c.promotedEverywhere(nc, src):
		r.Outcome = v1alpha1.OutcomePromoted
	default:
		r.Outcome = v1alpha1.OutcomeRollingOut
	}
	r.Promoted = func(prev *history.Pinned) bool { return c.promotedNow(nc, prev) }
	return c.o.History.Record(ctx, nc, r)
}

// promotedNow says whether every node nc selects runs revision p as its
// last-known-good, rolled out from its ConfigMap or pinned: either source.
func (c *Controller) promotedNow(nc *v1alpha1.NodeConfig, p *history.Pinned) bool {
	return c.lastKnownGoodEverywhere(nc, readFrom(p)) || c.lastKnownGoodEverywhere(nc, p.Source)
}

// lastKnownGoodEverywhere says whether every node nc selects has src as
// its last-known-good: src was promoted everywhere, whatever the nodes
// try since.
func (c *Controller) lastKnownGoodEverywhere(nc *v1alpha1.NodeConfig, src *nodeconfigv1.ConfigSource) bool {
	return c.everySelected(nc, func(n *NodeInfo) bool {
		return records.SameSource(n.Records.GetLastKnownGood().GetSource(), src)
	})
}

// promotedEverywhere says whether every node nc selects follows it and
// runs src as its assigned and last-known-good config, by the records
// last read from the node.
func (c *Controller) promotedEverywhere(nc *v1alpha1.NodeConfig, src *nodeconfigv1.ConfigSource) bool {
	return c.everySelected(nc, func(n *NodeInfo) bool {
		recs := n.Records
		return n.NodeConfig == nc.Name && recs.GetError() == nil &&
			records.SameSource(recs.GetAssigned().GetSource(), src) && records.SameSource(recs.GetLastKnownGood().GetSource(), src)
	})
}

// everySelected says whether ok holds for what was last read from every
// node nc selects (false where a node was not read yet).
func (c *Controller) everySelected(nc *v1alpha1.NodeConfig, ok func(*NodeInfo) bool) bool {
	selected := c.selectedNodes(nc)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, name := range selected {
		if n := c.nodes[name]; n == nil || !ok(n) {
			return false
		}
	}
	return true
}

// historyHandler queues the NodeConfig a revision belongs to: its status
// (the history's outcome), and its nodes when the revision comes or goes
// (one pinned may just have become readable, or gone).
func (c *Controller) historyHandler() cache.ResourceEventHandler {
	of := func(obj any) string {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if cr, ok := obj.(*appsv1.ControllerRevision); ok {
			return cr.Labels[v1alpha1.LabelHistoryOf]
		}
		return ""
	}
	nodesToo := func(obj any) {
		name := of(obj)
		c.queueStatus(name)
		if nc := c.liveNodeConfig(name); nc != nil && nc.Spec.Source != nil && nc.Spec.Source.Revision != nil {
			c.enqueueSelected(nc)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { nodesToo(obj) },
		UpdateFunc: func(_, cur any) { c.queueStatus(of(cur)) },
		DeleteFunc: func(obj any) { nodesToo(obj) },
	}
}

// historyRetry is when a NodeConfig whose history could not be written
// (or whose cache lags its own write) looks again.
const historyRetry = 2 * time.Second

// historyErr logs a failed history write; a cache that lags is no error.
func (c *Controller) historyErr(nc *v1alpha1.NodeConfig, err error) {
	if !errors.Is(err, history.ErrCacheBehind) {
		c.o.Log.Info("NodeConfig history not written; retrying", "nodeconfig", nc.Name, "err", err)
	}
}

// sameDocument says whether a and b are one YAML (or JSON) document
// written two ways: equal once decoded. Either that does not decode is
// not.
func sameDocument(a, b []byte) bool {
	var x, y any
	if yaml.Unmarshal(a, &x) != nil || yaml.Unmarshal(b, &y) != nil || x == nil {
		return false
	}
	return equality.Semantic.DeepEqual(x, y)
}
