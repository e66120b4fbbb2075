package controller

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	nodeconfiginformers "nodeconfig.io/services/api/client/informers"
	nodeconfiglisters "nodeconfig.io/services/api/client/listers/api/v1alpha1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/cmwatch"
)

// nodeConfigs lists every NodeConfig from the cache, sorted by name. They
// are the cache's own objects: callers must not change them.
func (c *Controller) nodeConfigs() ([]*v1alpha1.NodeConfig, error) {
	ncs, err := c.o.NodeConfigs.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	// A slice of the lister's own: sorting it leaves the cache alone.
	sort.Slice(ncs, func(i, j int) bool { return ncs[i].Name < ncs[j].Name })
	return ncs, nil
}

// NodeConfigInformer is factory's informer of NodeConfigs and a lister of
// its cache, which holds each version of a NodeConfig decoded once, as it
// arrives (every node sync reads every NodeConfig). factory starts it.
func NodeConfigInformer(factory nodeconfiginformers.SharedInformerFactory) (cache.SharedIndexInformer, nodeconfiglisters.NodeConfigLister) {
	ncs := factory.NodeConfig().V1alpha1().NodeConfigs()
	return ncs.Informer(), ncs.Lister()
}

// toNodeConfig is a NodeConfig of the informer's events, also from a
// deletion tombstone.
func toNodeConfig(obj any) (*v1alpha1.NodeConfig, error) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if nc, ok := obj.(*v1alpha1.NodeConfig); ok {
		return nc, nil
	}
	return nil, fmt.Errorf("unexpected NodeConfig object %T", obj)
}

// ReferencedConfigMaps names the ConfigMaps the NodeConfigs in lister use:
// the ones the reconciler watches.
func ReferencedConfigMaps(lister nodeconfiglisters.NodeConfigLister) []cmwatch.Ref {
	ncs, err := lister.List(labels.Everything())
	if err != nil {
		return nil
	}
	var refs []cmwatch.Ref
	for _, nc := range ncs {
		if nc.Spec.Source == nil || nc.Spec.Source.ConfigMap == nil {
			continue
		}
		refs = append(refs, cmwatch.Ref{Namespace: nc.Spec.Source.ConfigMap.Namespace, Name: nc.Spec.Source.ConfigMap.Name})
	}
	return refs
}
