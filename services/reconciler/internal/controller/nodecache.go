package controller

import (
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/types"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// NodeInfo is what the reconciler knows of one node; ReconcilerService
// shows it. It is a cache: everything in it can be rebuilt from checkpointd
// and the API, so a fail-over loses nothing.
type NodeInfo struct {
	Name          string
	NodeConfig    string
	State         nodeconfigv1.LifecycleState
	Records       *nodeconfigv1.Records
	Err           string
	Failures      int
	Backoff       time.Duration
	NextReconcile time.Time
	// Generations holds, per live NodeConfig selecting the node, the
	// generation its last sync was computed for: a NodeConfig's status
	// observes a generation only once all its nodes were synced at it.
	Generations []computedAt
	// SyncsStarted counts the begun syncs, and Syncs is the place among
	// them of the last that completed, one that ended early with an error
	// too but not one that waited for its ConfigMap's first listing: a
	// node's syncs run one at a time (the work queue never hands a key to
	// two workers), so once Syncs is past the SyncsStarted that Resync
	// returned, a sync that began after the Resync has run to its end
	// (GetNode shows both).
	Syncs, SyncsStarted uint64
	// retryDue is when the retry of the node's last counted failure comes
	// due; a failure before it leaves the backoff as it is (retry.go).
	retryDue time.Time
}

// computedAt is the generation of one NodeConfig a node's sync was
// computed for. A node has one or two, so a slice costs less than a map
// across thousands of nodes.
type computedAt struct {
	UID        types.UID
	Generation int64
}

// generation is the generation of NodeConfig uid the node's last sync was
// computed for; 0 if none.
func (n *NodeInfo) generation(uid types.UID) int64 {
	for _, g := range n.Generations {
		if g.UID == uid {
			return g.Generation
		}
	}
	return 0
}

// NodeInfos returns copies of every node's info, by name.
func (c *Controller) NodeInfos() []NodeInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]NodeInfo, 0, len(c.nodes))
	for _, n := range c.nodes {
		out = append(out, c.withSyncsLocked(*n))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// NodeInfo returns one node's info.
func (c *Controller) NodeInfo(name string) (NodeInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[name]
	if !ok {
		return NodeInfo{}, false
	}
	return c.withSyncsLocked(*n), true
}

// infoLocked returns the node's entry, making it on first use; c.mu must
// be held.
func (c *Controller) infoLocked(name string) *NodeInfo {
	info := c.nodes[name]
	if info == nil {
		info = &NodeInfo{Name: name}
		c.nodes[name] = info
	}
	return info
}

// internSources has thousands of nodes' records share one copy of each
// config source they name: the few configs of a fleet, each arriving with
// every record. The records are only read once cached, so a shared message
// is never changed. One with fields this build does not know is kept as
// it came.
func (c *Controller) internSources(r *nodeconfigv1.Records) {
	if a := r.GetAssigned(); a != nil {
		a.Source = c.sharedSource(a.Source)
	}
	if a := r.GetActive(); a != nil {
		a.Source = c.sharedSource(a.Source)
	}
	if l := r.GetLastKnownGood(); l != nil {
		l.Source = c.sharedSource(l.Source)
	}
	if co := r.GetConsumer(); co != nil {
		co.Source = c.sharedSource(co.Source)
	}
	if re := r.GetLastReset(); re != nil {
		re.From = c.sharedSource(re.From)
	}
}

// sourceKey is what makes two config sources the same.
type sourceKey struct{ namespace, name, uid, resourceVersion, key string }

func (c *Controller) sharedSource(src *nodeconfigv1.ConfigSource) *nodeconfigv1.ConfigSource {
	if src == nil || len(src.ProtoReflect().GetUnknown()) != 0 {
		return src
	}
	k := sourceKey{src.Namespace, src.Name, src.Uid, src.ResourceVersion, src.Key}
	if v, ok := c.sources.Get(k); ok {
		return v.(*nodeconfigv1.ConfigSource)
	}
	c.sources.Add(k, src)
	return src
}
