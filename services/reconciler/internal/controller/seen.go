package controller

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
)

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
