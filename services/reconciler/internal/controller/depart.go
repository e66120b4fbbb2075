package controller

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/policy"
)

// A node that no NodeConfig selects any more returns to its local default.
// One selector edit can make a whole fleet leave at once, so the reset is
// paced like any other change: it takes a place in the trial of the
// NodeConfig whose config the node leaves and holds it for that
// NodeConfig's soak, counted from the reset's record on the node itself, so
// that a new leader paces the same way.

// departFor paces the reset of one node.
func (c *Controller) departFor(node string) func(from *nodeconfigv1.ConfigSource, assignedBy string) (policy.Admission, int64, string) {
	return func(from *nodeconfigv1.ConfigSource, assignedBy string) (policy.Admission, int64, string) {
		nc := c.leaving(node, from, assignedBy)
		if nc == nil {
			// The NodeConfig is gone, and no other uses that config:
			// nothing to pace by.
			return policy.Admitted, 0, ""
		}
		soak := soakSeconds(nc)
		if nc.Annotations[v1alpha1.AnnotationResetNow] == "true" {
			return policy.Admitted, soak, nc.Name
		}
		if c.trialsHeld(nc).reason != "" {
			c.mu.Lock()
			c.departLocked(node, nc.Name)
			c.mu.Unlock()
			return policy.Wait, soak, nc.Name
		}
		seen := c.everyNodeSeen(node)
		selected := c.selectedNodes(nc)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.departLocked(node, nc.Name)
		if !seen {
			// A node not synced since this reconciler started may be soaking
			// its own reset.
			return policy.Wait, soak, nc.Name
		}
		if c.freePlacesLocked(nc, len(selected), node) <= 0 {
			return policy.Wait, soak, nc.Name
		}
		// A departure's place is counted by departuresInTrialLocked, not as
		// a trial of nc.
		info := c.infoLocked(node)
		info.Admitted, info.AdmittedFor = true, ""
		c.reindexLocked(info)
		return policy.Admitted, soak, nc.Name
	}
}

// departuresInTrialLocked counts the nodes leaving ncName whose reset is
// admitted or still soaking, except one.
func (c *Controller) departuresInTrialLocked(ncName, except string) int {
	now := c.o.Now()
	n := 0
	for name := range c.departing[ncName] {
		if info := c.nodes[name]; info != nil && name != except && (info.Admitted || info.Records.ResetSoaking(now)) {
			n++
		}
	}
	return n
}

// departLocked marks node as leaving ncName ("" for none).
func (c *Controller) departLocked(node, ncName string) {
	info := c.infoLocked(node)
	if info.DepartingFrom == ncName {
		return
	}
	removeFrom(c.departing, info.DepartingFrom, node)
	info.DepartingFrom = ncName
	addTo(c.departing, ncName, node)
	c.reindexLocked(info)
}

// departureAfterSync keeps a node's departure mark in step with its
// records: set while its reset soaks (also after a fail-over), cleared when
// it is selected again or its reset's soak ended. It returns the NodeConfig
// whose waiting nodes may now start.
func (c *Controller) departureAfterSyncLocked(info *NodeInfo, selectedBy *v1alpha1.NodeConfig, leaving *v1alpha1.NodeConfig) (freed string) {
	switch {
	case selectedBy != nil:
		c.departLocked(info.Name, "")
	case info.Records.ResetSoaking(c.o.Now()) && leaving != nil:
		c.departLocked(info.Name, leaving.Name)
	case info.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_WAITING && info.DepartingFrom != "":
		freed = info.DepartingFrom
		c.departLocked(info.Name, "")
	}
	return freed
}

// lets says whether nc lets the nodes it selects go back to their local
// default: it is being deleted, or names no source.
func lets(nc *v1alpha1.NodeConfig) bool {
	return nc.DeletionTimestamp != nil || nc.Spec.Source == nil || nc.Spec.Source.ConfigMap == nil
}

// leaving is the NodeConfig a departing node leaves: the one the node
// recorded (with its assignment, or its reset), else the one whose source
// is the config the node runs, else the one it departs from or was last
// selected by as this reconciler remembers. The node's own record is what
// holds when one edit changed both the selector and the source and a new
// leader never saw the node selected.
func (c *Controller) leaving(node string, from *nodeconfigv1.ConfigSource, recorded string) *v1alpha1.NodeConfig {
	if nc := c.nodeConfigNamed(recorded); nc != nil {
		return nc
	}
	if nc := c.nodeConfigUsing(from); nc != nil {
		return nc
	}
	c.mu.Lock()
	var remembered []string
	if info := c.nodes[node]; info != nil {
		remembered = []string{info.DepartingFrom, info.NodeConfig}
	}
	c.mu.Unlock()
	for _, name := range remembered {
		if nc := c.nodeConfigNamed(name); nc != nil {
			return nc
		}
	}
	return nil
}

// liveNodeConfig is the NodeConfig of that name from the cache, nil if
// there is none or it is being deleted.
func (c *Controller) liveNodeConfig(name string) *v1alpha1.NodeConfig {
	if nc := c.nodeConfigNamed(name); nc != nil && nc.DeletionTimestamp == nil {
		return nc
	}
	return nil
}

// nodeConfigNamed is the NodeConfig of that name from the cache, also one
// being deleted (its finalizer holds it while its nodes depart); nil if
// there is none.
func (c *Controller) nodeConfigNamed(name string) *v1alpha1.NodeConfig {
	if name == "" {
		return nil
	}
	obj, err := c.o.NodeConfigs.Get(name)
	if err != nil {
		return nil
	}
	nc, err := toNodeConfig(obj)
	if err != nil {
		return nil
	}
	return nc
}

// nodeConfigUsing finds the live NodeConfig whose source is the ConfigMap
// key src came from (the first by name if several).
func (c *Controller) nodeConfigUsing(src *nodeconfigv1.ConfigSource) *v1alpha1.NodeConfig {
	if src == nil {
		return nil
	}
	ncs, err := c.nodeConfigs()
	if err != nil {
		return nil
	}
	for _, nc := range ncs {
		ref := nc.Spec.Source
		if nc.DeletionTimestamp == nil && ref != nil && ref.ConfigMap != nil &&
			ref.ConfigMap.Namespace == src.GetNamespace() && ref.ConfigMap.Name == src.GetName() && ref.ConfigMap.Key == src.GetKey() {
			return nc
		}
	}
	return nil
}

// everyNodeSeen reports whether every Node but the one syncing was synced
// at least once since this reconciler started; once true it stays true, as
// a Node that joins later has no reset of ours to soak. The Nodes not seen
// are listed once and struck off as they are seen, so a sync of a large
// fleet's first round costs the same as any other.
func (c *Controller) everyNodeSeen(syncing string) bool {
	if c.allSeen.Load() {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.unseen == nil {
		nodes, err := c.o.Nodes.List(labels.Everything())
		if err != nil {
			return false
		}
		c.unseen = make(map[string]struct{}, len(nodes))
		for _, n := range nodes {
			c.unseen[n.Name] = struct{}{}
		}
	}
	for name := range c.unseen {
		if _, seen := c.nodes[name]; seen {
			delete(c.unseen, name)
			continue
		}
		if _, err := c.o.Nodes.Get(name); apierrors.IsNotFound(err) {
			delete(c.unseen, name) // gone before it was seen
			continue
		}
		if name != syncing {
			return false
		}
	}
	c.allSeen.Store(true)
	c.unseen = nil
	return true
}

// soakSeconds is nc's soak, defaulted.
func soakSeconds(nc *v1alpha1.NodeConfig) int64 {
	if nc.Spec.SoakSeconds == 0 {
		return v1alpha1.DefaultSoakSeconds
	}
	return nc.Spec.SoakSeconds
}
