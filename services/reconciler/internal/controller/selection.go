package controller

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"nodeconfig.io/services/api/v1alpha1"
)

// The selection cache keeps, per NodeConfig generation, its parsed node
// selector and the nodes it selects. Admission asks for both on every node
// sync: parsing validates with regular expressions, and listing walks every
// Node, so each is done once and kept until it can have changed.

// maxSelections bounds the cache; above it the entries of old generations
// are dropped with the rest, as they are cheap to build again.
const maxSelections = 1024

type selectorKey struct {
	uid        types.UID
	name       string
	generation int64
}

// selection is a NodeConfig generation's parsed selector and, when listed,
// the names of the nodes it selected at a nodesVersion.
type selection struct {
	selector labels.Selector
	// err is the parse error of an invalid selector, which selects nothing.
	err     error
	listed  bool
	version int64
	names   []string
}

// nodesChanged marks every listed selection stale: a Node came, went or
// changed labels.
func (c *Controller) nodesChanged() { c.nodesVersion.Add(1) }

// selector is nc's node selector, parsed once per generation.
func (c *Controller) selector(nc *v1alpha1.NodeConfig) labels.Selector {
	c.selMu.Lock()
	defer c.selMu.Unlock()
	return c.selectionLocked(nc).selector
}

// selectorErr is why nc's selector does not parse; nil when it does. The
// CRD refuses what it can, but an object stored before its rules were
// tightened is still served as it is.
func (c *Controller) selectorErr(nc *v1alpha1.NodeConfig) error {
	c.selMu.Lock()
	defer c.selMu.Unlock()
	return c.selectionLocked(nc).err
}

func (c *Controller) selects(nc *v1alpha1.NodeConfig, node *metav1.PartialObjectMetadata) bool {
	return c.selector(nc).Matches(labels.Set(node.Labels))
}

// selectionLocked returns the cache entry of nc's generation, parsing its
// selector when the entry is new.
func (c *Controller) selectionLocked(nc *v1alpha1.NodeConfig) *selection {
	key := selectorKey{nc.UID, nc.Name, nc.Generation}
	if e, ok := c.selections[key]; ok {
		return e
	}
	e := &selection{selector: labels.Nothing()}
	if nc.Spec.NodeSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(nc.Spec.NodeSelector)
		if err != nil {
			e.err = err
		} else {
			e.selector = sel
		}
	}
	if len(c.selections) > maxSelections {
		clear(c.selections)
	}
	c.selections[key] = e
	return e
}

// selectedNodes names the nodes nc selects; callers must not modify the
// slice. The list is kept until a Node comes, goes or is relabelled.
func (c *Controller) selectedNodes(nc *v1alpha1.NodeConfig) []string {
	version := c.nodesVersion.Load() // before listing: a change during it makes the entry stale
	c.selMu.Lock()
	e := c.selectionLocked(nc)
	if e.listed && e.version == version {
		names := e.names
		c.selMu.Unlock()
		return names
	}
	sel := e.selector
	c.selMu.Unlock()
	nodes, err := c.o.Nodes.List(sel)
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	c.selMu.Lock()
	e.listed, e.version, e.names = true, version, names
	c.selMu.Unlock()
	return names
}
