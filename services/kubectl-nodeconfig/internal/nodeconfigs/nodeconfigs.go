// Package nodeconfigs reads and pauses NodeConfigs (nodeconfig.io/v1alpha1)
// through the API's typed client, and says what a NodeConfig's spec and
// status mean for the plugin's outputs.
package nodeconfigs

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	nodeconfigclient "nodeconfig.io/services/api/client/clientset"
	"nodeconfig.io/services/api/v1alpha1"
)

// Condition returns the condition of that type, nil if it is not set.
func Condition(nc *v1alpha1.NodeConfig, t string) *metav1.Condition {
	return meta.FindStatusCondition(nc.Status.Conditions, t)
}

// ConfigMapOf is the ConfigMap the NodeConfig names, nil for the local
// default.
func ConfigMapOf(nc *v1alpha1.NodeConfig) *v1alpha1.ConfigMapSource {
	if nc.Spec.Source == nil {
		return nil
	}
	return nc.Spec.Source.ConfigMap
}

// Selects reports whether the NodeConfig's selector matches the labels. A
// selector that does not parse selects nothing (the reconciler changes no
// node and says InvalidSelector).
func Selects(nc *v1alpha1.NodeConfig, nodeLabels map[string]string) bool {
	return Selector(nc).Matches(labels.Set(nodeLabels))
}

// Selector is the NodeConfig's node selector, parsed once for many nodes;
// one that does not parse selects nothing.
func Selector(nc *v1alpha1.NodeConfig) labels.Selector {
	sel, err := metav1.LabelSelectorAsSelector(nc.Spec.NodeSelector)
	if err != nil {
		return labels.Nothing()
	}
	return sel
}

// SelectorText is the selector as kubectl shows one, "everything" for {}.
func SelectorText(nc *v1alpha1.NodeConfig) string {
	sel, err := metav1.LabelSelectorAsSelector(nc.Spec.NodeSelector)
	if err != nil {
		return fmt.Sprintf("invalid (%v)", err)
	}
	if sel.Empty() {
		return "everything"
	}
	return sel.String()
}

// Client reads and patches NodeConfigs.
type Client struct {
	NodeConfigs nodeconfigclient.Interface
}

// List returns every NodeConfig, by name.
func (c Client) List(ctx context.Context) ([]v1alpha1.NodeConfig, error) {
	list, err := c.NodeConfigs.NodeConfigV1alpha1().NodeConfigs().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list NodeConfigs: %w", err)
	}
	out := list.Items
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Get returns one NodeConfig.
func (c Client) Get(ctx context.Context, name string) (*v1alpha1.NodeConfig, error) {
	return c.NodeConfigs.NodeConfigV1alpha1().NodeConfigs().Get(ctx, name, metav1.GetOptions{})
}

// SetPaused merge-patches spec.rollout.paused and returns the object the API
// server stored.
func (c Client) SetPaused(ctx context.Context, name string, paused bool) (*v1alpha1.NodeConfig, error) {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"rollout": map[string]any{"paused": paused}}})
	if err != nil {
		return nil, err
	}
	return c.NodeConfigs.NodeConfigV1alpha1().NodeConfigs().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
}

// SetRevision merge-patches spec.source.revision (the revision of its
// history the NodeConfig rolls out), only on nc itself (its uid: not a
// NodeConfig recreated under its name, whose history is another), and
// returns the object the API server stored. The reconciler's status
// writes in between do not matter: the revision was checked against the
// history, which they do not change.
func (c Client) SetRevision(ctx context.Context, nc *v1alpha1.NodeConfig, revision int64) (*v1alpha1.NodeConfig, error) {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": nc.UID},
		"spec":     map[string]any{"source": map[string]any{"revision": revision}},
	})
	if err != nil {
		return nil, err
	}
	return c.NodeConfigs.NodeConfigV1alpha1().NodeConfigs().Patch(ctx, nc.Name, types.MergePatchType, patch, metav1.PatchOptions{})
}
