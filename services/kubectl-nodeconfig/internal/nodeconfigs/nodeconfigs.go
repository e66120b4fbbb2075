// Package nodeconfigs reads and pauses NodeConfigs (nodeconfig.io/v1alpha1)
// through the dynamic client.
package nodeconfigs

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"nodeconfig.io/services/api/v1alpha1"
)

// GVR is the NodeConfig resource.
var GVR = v1alpha1.GroupVersionResource

// The API's types, under the names the plugin reads them by.
type (
	NodeConfig        = v1alpha1.NodeConfig
	Spec              = v1alpha1.NodeConfigSpec
	Source            = v1alpha1.Source
	ConfigMapSource   = v1alpha1.ConfigMapSource
	Rollout           = v1alpha1.Rollout
	Window            = v1alpha1.Window
	Status            = v1alpha1.NodeConfigStatus
	RolledBackVersion = v1alpha1.RolledBackVersion
)

// Condition types and the reasons the plugin explains.
const (
	ConditionReady       = v1alpha1.ConditionReady
	ConditionProgressing = v1alpha1.ConditionProgressing
	ConditionDegraded    = v1alpha1.ConditionDegraded

	ReasonRolloutHalted            = v1alpha1.ReasonRolloutHalted
	ReasonSelectorConflict         = v1alpha1.ReasonSelectorConflict
	ReasonInvalidSelector          = v1alpha1.ReasonInvalidSelector
	ReasonInvalidReconcileInterval = v1alpha1.ReasonInvalidReconcileInterval
	ReasonConfigRefused            = v1alpha1.ReasonConfigRefused
	ReasonValidationUnavailable    = v1alpha1.ReasonValidationUnavailable
	ReasonPaused                   = v1alpha1.ReasonPaused
	ReasonOutsideWindow            = v1alpha1.ReasonOutsideWindow
	ReasonInvalidWindow            = v1alpha1.ReasonInvalidWindow
	ReasonNodesFailing             = v1alpha1.ReasonNodesFailing
)

// Condition returns the condition of that type, nil if it is not set.
func Condition(nc *NodeConfig, t string) *metav1.Condition {
	return meta.FindStatusCondition(nc.Status.Conditions, t)
}

// ConfigMap is the ConfigMap the NodeConfig names, nil for the local default.
func ConfigMapOf(nc *NodeConfig) *ConfigMapSource {
	if nc.Spec.Source == nil {
		return nil
	}
	return nc.Spec.Source.ConfigMap
}

// Selects reports whether the NodeConfig's selector matches the labels. A
// selector that does not parse selects nothing (the reconciler changes no
// node and says InvalidSelector).
func Selects(nc *NodeConfig, nodeLabels map[string]string) bool {
	sel, err := metav1.LabelSelectorAsSelector(nc.Spec.NodeSelector)
	if err != nil {
		return false
	}
	return sel.Matches(labels.Set(nodeLabels))
}

// SelectorText is the selector as kubectl shows one, "everything" for {}.
func SelectorText(nc *NodeConfig) string {
	sel, err := metav1.LabelSelectorAsSelector(nc.Spec.NodeSelector)
	if err != nil {
		return fmt.Sprintf("invalid (%v)", err)
	}
	if sel.Empty() {
		return "everything"
	}
	return sel.String()
}

// FromObject converts an object of the dynamic client.
func FromObject(obj map[string]any) (*NodeConfig, error) {
	nc := &NodeConfig{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, nc); err != nil {
		return nil, fmt.Errorf("NodeConfig: %w", err)
	}
	return nc, nil
}

// Client reads and patches NodeConfigs.
type Client struct {
	Dynamic dynamic.Interface
}

// List returns every NodeConfig, by name.
func (c Client) List(ctx context.Context) ([]NodeConfig, error) {
	list, err := c.Dynamic.Resource(GVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list NodeConfigs: %w", err)
	}
	out := make([]NodeConfig, 0, len(list.Items))
	for i := range list.Items {
		nc, err := FromObject(list.Items[i].Object)
		if err != nil {
			return nil, err
		}
		out = append(out, *nc)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Get returns one NodeConfig.
func (c Client) Get(ctx context.Context, name string) (*NodeConfig, error) {
	u, err := c.Dynamic.Resource(GVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return FromObject(u.Object)
}

// SetPaused merge-patches spec.rollout.paused and returns the object the API
// server stored.
func (c Client) SetPaused(ctx context.Context, name string, paused bool) (*NodeConfig, error) {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"rollout": map[string]any{"paused": paused}}})
	if err != nil {
		return nil, err
	}
	u, err := c.Dynamic.Resource(GVR).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, err
	}
	return FromObject(u.Object)
}
