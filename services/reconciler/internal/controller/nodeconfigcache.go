package controller

import (
	"fmt"
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/cmwatch"
)

// nodeConfigs lists every NodeConfig from the cache, sorted by name. They
// are shared between callers, which must not change them.
func (c *Controller) nodeConfigs() ([]*v1alpha1.NodeConfig, error) {
	objs, err := c.o.NodeConfigs.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := make([]*v1alpha1.NodeConfig, 0, len(objs))
	c.decoded.mu.Lock()
	for _, obj := range objs {
		nc, err := c.decoded.get(obj)
		if err != nil {
			c.o.Log.Error("skipping undecodable NodeConfig", "err", err)
			continue
		}
		out = append(out, nc)
	}
	if len(c.decoded.byUID) > len(out) {
		c.decoded.keepOnly(out)
	}
	c.decoded.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// decodedNodeConfigs keeps each cached NodeConfig decoded once per
// resourceVersion: every node sync looks at every NodeConfig, and so its
// cost does not grow with the NodeConfigs a cluster has.
type decodedNodeConfigs struct {
	mu    sync.Mutex
	byUID map[types.UID]decodedNodeConfig
}

type decodedNodeConfig struct {
	resourceVersion string
	nc              *v1alpha1.NodeConfig
}

// get decodes obj, or returns its decoding of the same version. An object
// without a resourceVersion (never one from the API server) is decoded
// every time. Guarded by mu.
func (d *decodedNodeConfigs) get(obj any) (*v1alpha1.NodeConfig, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return toNodeConfig(obj)
	}
	uid, rv := u.GetUID(), u.GetResourceVersion()
	if e, ok := d.byUID[uid]; ok && rv != "" && e.resourceVersion == rv {
		return e.nc, nil
	}
	nc, err := toNodeConfig(u)
	if err != nil {
		return nil, err
	}
	if rv != "" {
		if d.byUID == nil {
			d.byUID = map[types.UID]decodedNodeConfig{}
		}
		d.byUID[uid] = decodedNodeConfig{resourceVersion: rv, nc: nc}
	}
	return nc, nil
}

// keepOnly forgets the NodeConfigs that are gone. Guarded by mu.
func (d *decodedNodeConfigs) keepOnly(live []*v1alpha1.NodeConfig) {
	kept := make(map[types.UID]decodedNodeConfig, len(live))
	for _, nc := range live {
		if e, ok := d.byUID[nc.UID]; ok && e.nc == nc {
			kept[nc.UID] = e
		}
	}
	d.byUID = kept
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
