// Package nodeconfigs reads and pauses NodeConfigs (nodeconfig.io/v1alpha1)
// through the dynamic client.
//
// The types mirror the fields the plugin reads of
// services/reconciler/internal/apis/v1alpha1 (internal to the reconciler's
// module, so not importable here); the CRD in deploy/crd is the contract.
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
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
)

// GVR is the NodeConfig resource.
var GVR = schema.GroupVersionResource{Group: "nodeconfig.io", Version: "v1alpha1", Resource: "nodeconfigs"}

// Condition types and the reasons the plugin explains.
const (
	ConditionReady       = "Ready"
	ConditionProgressing = "Progressing"
	ConditionDegraded    = "Degraded"

	ReasonRolloutHalted            = "RolloutHalted"
	ReasonSelectorConflict         = "SelectorConflict"
	ReasonInvalidSelector          = "InvalidSelector"
	ReasonInvalidReconcileInterval = "InvalidReconcileInterval"
	ReasonConfigRefused            = "ConfigRefused"
	ReasonPaused                   = "Paused"
	ReasonOutsideWindow            = "OutsideMaintenanceWindow"
	ReasonInvalidWindow            = "InvalidMaintenanceWindow"
	ReasonNodesFailing             = "NodesFailing"
)

// NodeConfig is the part of a NodeConfig the plugin reads.
type NodeConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec   `json:"spec"`
	Status            Status `json:"status,omitempty"`
}

// Spec is what the user wants.
type Spec struct {
	NodeSelector *metav1.LabelSelector `json:"nodeSelector"`
	Source       *Source               `json:"source,omitempty"`
	Validator    string                `json:"validator,omitempty"`
	SoakSeconds  int64                 `json:"soakSeconds,omitempty"`
	Rollout      Rollout               `json:"rollout,omitempty"`
}

// Source names the ConfigMap key; nil is the nodes' local default.
type Source struct {
	ConfigMap *ConfigMapSource `json:"configMap,omitempty"`
}

// ConfigMapSource is one key of a ConfigMap.
type ConfigMapSource struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Key       string `json:"key"`
}

// Rollout paces a version across the nodes.
type Rollout struct {
	MaxInTrial  *intstr.IntOrString `json:"maxInTrial,omitempty"`
	MaxFailures *int32              `json:"maxFailures,omitempty"`
	Paused      bool                `json:"paused,omitempty"`
	Windows     []Window            `json:"windows,omitempty"`
}

// Window is a recurring maintenance window.
type Window struct {
	Days     []string `json:"days,omitempty"`
	Start    string   `json:"start"`
	End      string   `json:"end"`
	TimeZone string   `json:"timeZone,omitempty"`
}

// Status is what the reconciler observed.
type Status struct {
	ObservedGeneration int64               `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition  `json:"conditions,omitempty"`
	Selected           int32               `json:"selected"`
	Waiting            int32               `json:"waiting"`
	Soaking            int32               `json:"soaking"`
	Active             int32               `json:"active"`
	RolledBack         int32               `json:"rolledBack"`
	Failing            int32               `json:"failing"`
	NextWindow         *metav1.Time        `json:"nextWindow,omitempty"`
	RolledBackVersions []RolledBackVersion `json:"rolledBackVersions,omitempty"`
}

// RolledBackVersion is a config version and the nodes that rolled back
// from it.
type RolledBackVersion struct {
	UID             string   `json:"uid"`
	ResourceVersion string   `json:"resourceVersion"`
	Key             string   `json:"key"`
	Validator       string   `json:"validator"`
	Nodes           []string `json:"nodes"`
}

// Condition returns the condition of that type, nil if it is not set.
func (nc *NodeConfig) Condition(t string) *metav1.Condition {
	return meta.FindStatusCondition(nc.Status.Conditions, t)
}

// ConfigMap is the ConfigMap the NodeConfig names, nil for the local default.
func (nc *NodeConfig) ConfigMap() *ConfigMapSource {
	if nc.Spec.Source == nil {
		return nil
	}
	return nc.Spec.Source.ConfigMap
}

// Selects reports whether the NodeConfig's selector matches the labels. A
// selector that does not parse selects nothing (the reconciler changes no
// node and says InvalidSelector).
func (nc *NodeConfig) Selects(nodeLabels map[string]string) bool {
	sel, err := metav1.LabelSelectorAsSelector(nc.Spec.NodeSelector)
	if err != nil {
		return false
	}
	return sel.Matches(labels.Set(nodeLabels))
}

// SelectorText is the selector as kubectl shows one, "everything" for {}.
func (nc *NodeConfig) SelectorText() string {
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
