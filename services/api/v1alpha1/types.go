// Package v1alpha1 holds the Go types of the NodeConfig API
// (nodeconfig.io/v1alpha1), the CRD in deploy/crd.
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// GroupVersionResource of NodeConfig.
var GroupVersionResource = schema.GroupVersionResource{Group: "nodeconfig.io", Version: "v1alpha1", Resource: "nodeconfigs"}

// What each node says of itself, on its Node object (written by its agent's
// statusd): the NodeConfigStatus as JSON, and one condition.
const (
	// NodeAnnotationConfigStatus holds the node's NodeConfigStatus (the shape
	// of core/v1 NodeConfigStatus: assigned, active, lastKnownGood, error).
	NodeAnnotationConfigStatus = "nodeconfig.io/config-status"
	// NodeConditionConfigReady is the node's condition type.
	NodeConditionConfigReady = "NodeConfigReady"
)

// Annotations users set on a NodeConfig.
const (
	// AnnotationReconcileInterval is the mean periodic reconcile interval in
	// seconds (jittered 0.5x-1.5x); 0 stops periodic reconciles once a node is
	// up to date.
	AnnotationReconcileInterval = "nodeconfig.io/reconcile-interval-in-seconds"
	// AnnotationDeletionPolicy "abandon" leaves nodes on their config when the
	// NodeConfig is deleted; otherwise they are reset to local defaults.
	AnnotationDeletionPolicy = "nodeconfig.io/deletion-policy"
	DeletionPolicyAbandon    = "abandon"
	// AnnotationAbandoned marks a Node whose NodeConfig was deleted with the
	// abandon policy: it keeps its config until another NodeConfig selects it.
	AnnotationAbandoned = "nodeconfig.io/abandoned-by"
	// Finalizer lets the reconciler reset or abandon the nodes before a
	// NodeConfig disappears.
	Finalizer = "nodeconfig.io/nodes"
)

// Condition types and reasons on a NodeConfig.
const (
	ConditionReady       = "Ready"
	ConditionProgressing = "Progressing"
	ConditionDegraded    = "Degraded"

	ReasonRolloutHalted    = "RolloutHalted"
	ReasonSelectorConflict = "SelectorConflict"
	// ReasonInvalidSelector: spec.nodeSelector does not parse; no node is
	// changed until it is fixed.
	ReasonInvalidSelector = "InvalidSelector"
	// ReasonInvalidReconcileInterval: the reconcile-interval annotation is
	// not a whole number of seconds >= 0; the default is used meanwhile.
	ReasonInvalidReconcileInterval = "InvalidReconcileInterval"
	// ReasonConfigRefused: the current payload fails the NodeConfig's
	// validator in the reconciler; it is assigned to no node.
	ReasonConfigRefused = "ConfigRefused"
	// ReasonPaused: spec.rollout.paused holds new trials.
	ReasonPaused = "Paused"
	// ReasonOutsideWindow: no maintenance window is open; the status says
	// when the next one opens.
	ReasonOutsideWindow = "OutsideMaintenanceWindow"
	// ReasonInvalidWindow: a maintenance window does not parse; no trial
	// starts until it is fixed.
	ReasonInvalidWindow = "InvalidMaintenanceWindow"
	// ReasonNodesFailing: nodes fail with early errors (unreachable
	// agents, a missing ConfigMap); they retry with backoff.
	ReasonNodesFailing = "NodesFailing"
)

// NodeConfig assigns a config to the nodes its selector matches.
type NodeConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NodeConfigSpec   `json:"spec"`
	Status NodeConfigStatus `json:"status,omitempty"`
}

// NodeConfigSpec is what the user wants.
type NodeConfigSpec struct {
	NodeSelector *metav1.LabelSelector `json:"nodeSelector"`
	Source       *Source               `json:"source,omitempty"`
	Validator    string                `json:"validator,omitempty"`
	SoakSeconds  int64                 `json:"soakSeconds,omitempty"`
	Rollout      Rollout               `json:"rollout,omitempty"`
}

// Source names where the config comes from; nil means local defaults.
type Source struct {
	ConfigMap *ConfigMapSource `json:"configMap,omitempty"`
}

// ConfigMapSource is one key of a ConfigMap.
type ConfigMapSource struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Key       string `json:"key"`
}

// Rollout paces a new config version across the selected nodes.
type Rollout struct {
	MaxInTrial  *intstr.IntOrString `json:"maxInTrial,omitempty"`
	MaxFailures *int32              `json:"maxFailures,omitempty"`
	// Paused starts no new trial; nodes already soaking finish and promote.
	Paused bool `json:"paused,omitempty"`
	// Windows are when a trial (and the kubelet restart it brings) may
	// start; none means any time.
	Windows []Window `json:"windows,omitempty"`
}

// Window is a recurring maintenance window: Start to End ("HH:MM", End
// before Start wraps past midnight) on Days (empty: every day), in TimeZone
// (an IANA name, default UTC).
type Window struct {
	Days     []string `json:"days,omitempty"`
	Start    string   `json:"start"`
	End      string   `json:"end"`
	TimeZone string   `json:"timeZone,omitempty"`
}

// NodeConfigStatus is what the reconciler observed.
type NodeConfigStatus struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	Selected           int32              `json:"selected"`
	Waiting            int32              `json:"waiting"`
	Soaking            int32              `json:"soaking"`
	Active             int32              `json:"active"`
	RolledBack         int32              `json:"rolledBack"`
	Failing            int32              `json:"failing"`
	// NextWindow is when the next maintenance window opens, while none is
	// open and nodes wait for one.
	NextWindow *metav1.Time `json:"nextWindow,omitempty"`
	// RolledBackVersions names, per config version, the nodes that rolled
	// back from it. A halt is a fact about a version, so it is kept here,
	// where neither a node's deletion nor a reconciler fail-over loses it.
	RolledBackVersions []RolledBackVersion `json:"rolledBackVersions,omitempty"`
}

// RolledBackVersion is one config version — what decides whether a config
// loads: the ConfigMap version, its key and the validator, not the soak —
// and the nodes that rolled back from it.
type RolledBackVersion struct {
	UID             string   `json:"uid"`
	ResourceVersion string   `json:"resourceVersion"`
	Key             string   `json:"key"`
	Validator       string   `json:"validator"`
	Nodes           []string `json:"nodes"`
}

// FromUnstructured converts an object from the dynamic client.
func FromUnstructured(obj map[string]any) (*NodeConfig, error) {
	nc := &NodeConfig{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, nc); err != nil {
		return nil, err
	}
	return nc, nil
}

// ToUnstructured converts for the dynamic client.
func ToUnstructured(nc *NodeConfig) (map[string]any, error) {
	return runtime.DefaultUnstructuredConverter.ToUnstructured(nc)
}
