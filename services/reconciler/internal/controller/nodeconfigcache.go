package controller

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/cmwatch"
)

// nodeConfigs lists every NodeConfig from the cache, sorted by name. They
// are the cache's own objects: callers must not change them.
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

// NodeConfigInformer is factory's informer of NodeConfigs, its cache
// holding them decoded (DecodeNodeConfig), and a lister of that cache.
// factory's own lister would not do: it asserts unstructured objects.
func NodeConfigInformer(factory dynamicinformer.DynamicSharedInformerFactory) (cache.SharedIndexInformer, cache.GenericLister, error) {
	informer := factory.ForResource(v1alpha1.GroupVersionResource).Informer()
	if err := informer.SetTransform(DecodeNodeConfig); err != nil {
		return nil, nil, fmt.Errorf("NodeConfig informer: %w", err)
	}
	return informer, cache.NewGenericLister(informer.GetIndexer(), v1alpha1.GroupVersionResource.GroupResource()), nil
}

// DecodeNodeConfig is the NodeConfig informer's transform: its cache holds
// each version of a NodeConfig decoded once, as it arrives, because every
// node sync reads every NodeConfig. One that does not decode is kept as it
// came, and toNodeConfig says why wherever it is read; an object decoded
// already (a transform may see one again) is kept too.
func DecodeNodeConfig(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	nc, err := v1alpha1.FromUnstructured(u.Object)
	if err != nil {
		return obj, nil
	}
	return nc, nil
}

// toNodeConfig is a cached NodeConfig, also from a deletion tombstone.
func toNodeConfig(obj any) (*v1alpha1.NodeConfig, error) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	switch o := obj.(type) {
	case *v1alpha1.NodeConfig:
		return o, nil
	case *unstructured.Unstructured:
		// One DecodeNodeConfig could not decode: decoding it again says why.
		nc, err := v1alpha1.FromUnstructured(o.Object)
		if err != nil {
			return nil, fmt.Errorf("NodeConfig %s: %w", o.GetName(), err)
		}
		return nc, nil
	}
	return nil, fmt.Errorf("unexpected NodeConfig object %T", obj)
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
