package controller

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/labels"
	selectionop "k8s.io/apimachinery/pkg/selection"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/pacing"
	"nodeconfig.io/services/reconciler/internal/rollout"
)

// Wave pacing (spec.rollout.topologyKey) reads each node's value of the
// key on every admission: the values are listed once per key and kept
// until a Node comes, goes or is relabelled, as the selections are.

// maxWaveKeys bounds the cache; a fleet's NodeConfigs use a key or two.
const maxWaveKeys = 64

// waveValues is one key's values at a nodesVersion.
type waveValues struct {
	version int64
	values  map[string]string
}

// valuesOf maps the Nodes that have label key (with a value) to it;
// callers must not modify the map.
func (c *Controller) valuesOf(key string) map[string]string {
	version := c.nodesVersion.Load() // before listing: a change during it makes the entry stale
	c.selMu.Lock()
	e := c.waveValues[key]
	c.selMu.Unlock()
	if e != nil && e.version == version {
		return e.values
	}
	sel := labels.Everything()
	if req, err := labels.NewRequirement(key, selectionop.Exists, nil); err == nil {
		sel = labels.NewSelector().Add(*req)
	}
	nodes, err := c.o.Nodes.List(sel)
	if err != nil {
		return nil
	}
	values := make(map[string]string, len(nodes))
	for _, n := range nodes {
		if v := n.Labels[key]; v != pacing.Unlabelled {
			values[n.Name] = v
		}
	}
	c.selMu.Lock()
	if len(c.waveValues) > maxWaveKeys {
		clear(c.waveValues)
	}
	c.waveValues[key] = &waveValues{version: version, values: values}
	c.selMu.Unlock()
	return values
}

// wavesOf is what wave pacing reads for nc towards want, nil when nc
// has no topologyKey: one wave of every node.
func (c *Controller) wavesOf(nc *v1alpha1.NodeConfig, selected []string, want rollout.Want) *rollout.Waves {
	key := nc.Spec.Rollout.TopologyKey
	if key == "" {
		return nil
	}
	return &rollout.Waves{Values: c.valuesOf(key), Selected: selected, Want: want}
}

// wantOf is the version nc's nodes are to run now: src, or the revision
// its halt is undone to; their local default for a NodeConfig that lets
// them go. ok is false when nc has a source that does not resolve (src
// nil): nothing is assigned.
func (c *Controller) wantOf(nc *v1alpha1.NodeConfig, src *nodeconfigv1.ConfigSource) (want rollout.Want, ok bool) {
	if rollout.Lets(nc) {
		return rollout.Want{}, true
	}
	if src == nil {
		return rollout.Want{}, false
	}
	validator := validators[nc.Spec.Validator]
	if p := c.undoTarget(nc, src); p != nil {
		return rollout.Want{Source: p.Source, Validator: validator, Runs: []*nodeconfigv1.ConfigSource{readFrom(p)}}, true
	}
	return rollout.Want{Source: src, Validator: validator}, true
}

// waveStatus is nc's status.waves, nodes towards src, and the Progressing
// condition's line about them ("" for none): which wave is under way, or that no selected
// node has the label, so that a mistyped key is not silently one wave.
func (c *Controller) waveStatus(nc *v1alpha1.NodeConfig, selected []string, src *nodeconfigv1.ConfigSource) (*v1alpha1.RolloutWaves, string) {
	key := nc.Spec.Rollout.TopologyKey
	if key == "" {
		return nil, ""
	}
	want, assigns := c.wantOf(nc, src)
	w := c.wavesOf(nc, selected, want)
	values := make([]string, 0, len(selected)+1)
	for _, n := range selected {
		values = append(values, w.Values[n])
	}
	if !assigns {
		// No version: only departures take turns.
		w.Selected = nil
	}
	current, ok := c.book.CurrentWave(nc.Name, w)
	if ok {
		// A wave of departing nodes alone is shown too.
		values = append(values, current)
	}
	order := pacing.WaveOrder(slices.Values(values))
	st := &v1alpha1.RolloutWaves{TopologyKey: key, Order: order[:min(len(order), v1alpha1.MaxListedWaves)], Count: int32(len(order))}
	if ok {
		st.Current = int32(slices.Index(order, current) + 1)
	}
	if len(selected) > 0 && !slices.ContainsFunc(selected, func(n string) bool { _, has := w.Values[n]; return has }) {
		return st, fmt.Sprintf("spec.rollout.topologyKey %s: no selected node has this label, so all %d are one wave", key, len(selected))
	}
	if !ok {
		return st, ""
	}
	wave := fmt.Sprintf("%s=%s", key, current)
	if current == pacing.Unlabelled {
		wave = "the nodes without " + key
	}
	return st, fmt.Sprintf("wave %d of %d: %s", st.Current, st.Count, wave)
}
