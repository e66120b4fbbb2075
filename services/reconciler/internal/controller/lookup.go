package controller

import (
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
)

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
