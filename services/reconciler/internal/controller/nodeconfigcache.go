package controller

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/cmwatch"
)

// nodeConfigs lists every NodeConfig from the cache.
func (c *Controller) nodeConfigs() ([]*v1alpha1.NodeConfig, error) {
	objs, err := c.o.NodeConfigs.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := make([]*v1alpha1.NodeConfig, 0, len(objs))
	for _, obj := range objs {
		nc, err := toNodeConfig(obj)
		if err != nil {
			c.o.Log.Error("skipping undecodable NodeConfig", "err", err)
			continue
		}
		out = append(out, nc)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// toNodeConfig decodes a cached NodeConfig, also from a deletion tombstone.
func toNodeConfig(obj any) (*v1alpha1.NodeConfig, error) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("unexpected NodeConfig object %T", obj)
	}
	return v1alpha1.FromUnstructured(u.Object)
}

// ReferencedConfigMaps names the ConfigMaps the NodeConfigs in lister use:
// the ones the reconciler watches.
func ReferencedConfigMaps(lister cache.GenericLister) []cmwatch.Ref {
	objs, err := lister.List(labels.Everything())
	if err != nil {
		return nil
	}
	var refs []cmwatch.Ref
	for _, obj := range objs {
		nc, err := toNodeConfig(obj)
		if err != nil || nc.Spec.Source == nil || nc.Spec.Source.ConfigMap == nil {
			continue
		}
		refs = append(refs, cmwatch.Ref{Namespace: nc.Spec.Source.ConfigMap.Namespace, Name: nc.Spec.Source.ConfigMap.Name})
	}
	return refs
}
