package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// DefaultSoakSeconds is the soak of a NodeConfig that sets none: long enough
// for a config to meet a node's daily load before it becomes last-known-good.
// The CRD's default marker on spec.soakSeconds repeats it (a test checks).
const DefaultSoakSeconds = 600

// NodeConfig assigns a config file from a ConfigMap to the nodes its selector
// matches. Each node checkpoints it, activates it, soaks it, and promotes it
// to last-known-good; a config that fails to load or validate rolls the node
// back.
//
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=nc,categories=nodeconfig
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.spec.source.configMap.name`,description="ConfigMap the selected nodes use (empty = local defaults)"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.selected`,description="Nodes the selector matches"
// +kubebuilder:printcolumn:name="Active",type=integer,JSONPath=`.status.active`,description="Nodes whose assigned config is last-known-good"
// +kubebuilder:printcolumn:name="Soaking",type=integer,JSONPath=`.status.soaking`,priority=1
// +kubebuilder:printcolumn:name="RolledBack",type=integer,JSONPath=`.status.rolledBack`,priority=1
// +kubebuilder:printcolumn:name="Paused",type=boolean,JSONPath=`.spec.rollout.paused`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NodeConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// What the nodes should run: which nodes, which config, how it is
	// validated, soaked and rolled out.
	Spec NodeConfigSpec `json:"spec"`
	// What the reconciler observed of the selected nodes.
	Status NodeConfigStatus `json:"status,omitempty"`
}

// NodeConfigList is a list of NodeConfigs.
//
// +kubebuilder:object:root=true
type NodeConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []NodeConfig `json:"items"`
}

// NodeConfigSpec is what the user wants.
type NodeConfigSpec struct {
	// Nodes this NodeConfig applies to, by their labels. {} selects every
	// node. The API refuses keys, values and operators a label selector does
	// not accept.
	NodeSelector *LabelSelector `json:"nodeSelector"`
	// The config to use. Absent means the nodes' local defaults.
	// +optional
	Source *Source `json:"source,omitempty"`
	// How the payload is validated before it is used, by the reconciler and
	// by each node: kubelet (the kubelet's own checks of a
	// KubeletConfiguration), yaml, json, or none.
	// +kubebuilder:validation:Enum=kubelet;yaml;json;none
	// +kubebuilder:default=yaml
	// +optional
	Validator string `json:"validator,omitempty"`
	// How long a config must stay active before it becomes last-known-good,
	// in seconds (at most 30 days).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2592000
	// +kubebuilder:default=600
	// +optional
	SoakSeconds int64 `json:"soakSeconds,omitempty"`
	// How a new config version is paced across the selected nodes.
	// +kubebuilder:default={}
	// +optional
	Rollout Rollout `json:"rollout,omitempty"`
	// What each node must show through the soak beyond the default gate
	// (the Node Ready and free of memory, disk and PID pressure, its pods
	// Ready again): a failure rolls the node back, and where a gate cannot
	// be evaluated the soak holds.
	// +optional
	Health *HealthGates `json:"health,omitempty"`
}

// HealthGates are what a NodeConfig asks of each node through its soak.
type HealthGates struct {
	// Node conditions that must hold (node-problem-detector's, say).
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Conditions []NodeConditionGate `json:"conditions,omitempty"`
	// A CEL expression over the Node (the variable node, as the API serves
	// it) that must be true, for example
	// "node.status.allocatable.pods != '0'". One that does not compile holds
	// the rollout (Degraded InvalidHealthGate); nothing changes on any node.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	CEL string `json:"cel,omitempty"`
	// An instant query against a Prometheus server that must return no
	// series; a server out of reach holds the soak.
	// +optional
	Prometheus *PrometheusGate `json:"prometheus,omitempty"`
}

// NodeConditionGate is a Node condition and the status it must have.
type NodeConditionGate struct {
	// The condition's type.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=316
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$`
	Type string `json:"type"`
	// The status it must have.
	// +kubebuilder:validation:Enum=True;False;Unknown
	Status string `json:"status"`
}

// PrometheusGate is an instant query against a Prometheus server.
type PrometheusGate struct {
	// The server's base URL, http or https (the agent queries
	// URL/api/v1/query from the node).
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https']",message="url must be an http or https URL"
	URL string `json:"url"`
	// The PromQL query; any series it returns fails the gate, with the
	// series in the node's late error. $node in it is the node's name
	// (e.g. kube_node_status_condition{node="$node",condition="Ready",status="false"} == 1).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Query string `json:"query"`
}

// Source names where the config comes from; nil means local defaults.
//
// +kubebuilder:validation:XValidation:rule="!has(self.revision) || has(self.configMap)",message="revision needs configMap: it is a stored version of that ConfigMap key"
type Source struct {
	// A key of a ConfigMap.
	// +optional
	ConfigMap *ConfigMapSource `json:"configMap,omitempty"`
	// Rolls out this stored revision of the NodeConfig's history (kubectl
	// nodeconfig history) instead of what the ConfigMap holds now: the
	// nodes get the revision's bytes, at the rollout's pace, even once the
	// ConfigMap was edited or deleted. kubectl nodeconfig undo sets it;
	// removing it follows the ConfigMap again.
	// +kubebuilder:validation:Minimum=1
	// +optional
	Revision *int64 `json:"revision,omitempty"`
}

// ConfigMapSource is one key of a ConfigMap.
type ConfigMapSource struct {
	// Namespace of the ConfigMap.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`
	// Name of the ConfigMap.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
	// The ConfigMap key whose value is the config file.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +kubebuilder:validation:XValidation:rule="self != '.' && self != '..'",message="key must not be '.' or '..'"
	Key string `json:"key"`
}

// Rollout paces a new config version across the selected nodes.
type Rollout struct {
	// Most selected nodes soaking a new config at once (a number or a
	// percentage, rounded up); default 10%, at least one node.
	// +kubebuilder:default="10%"
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^(100|[1-9][0-9]?)%$')",message="maxInTrial must be a whole number of at least 1 or a percentage from 1% to 100%"
	// +optional
	MaxInTrial *intstr.IntOrString `json:"maxInTrial,omitempty"`
	// Rollbacks of one config version that halt its rollout; 0 never halts.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:default=1
	// +optional
	MaxFailures *int32 `json:"maxFailures,omitempty"`
	// No new trial starts while true; nodes already soaking finish and
	// promote.
	// +optional
	Paused bool `json:"paused,omitempty"`
	// Maintenance windows: a trial (and the kubelet restart it brings) starts
	// only inside one; none means any time. Outside every window nothing
	// restarts, and the status says when the next one opens.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Windows []Window `json:"windows,omitempty"`
	// What a halt does to the nodes that already took the halted version
	// (soaking or promoted): Undo takes them back to the last revision
	// promoted everywhere before it, paced as any rollout (maxInTrial,
	// pause, windows), until the source changes again; Hold leaves them
	// on it. Undo needs the history (the revision to go back to); with
	// none, a halt holds.
	// +kubebuilder:validation:Enum=Undo;Hold
	// +kubebuilder:default=Undo
	// +optional
	OnHalt string `json:"onHalt,omitempty"`
	// A node label key (e.g. topology.kubernetes.io/zone) whose values are
	// the rollout's waves: at most one value has nodes on trial at a time
	// (within maxInTrial), and the next value starts only once every node of
	// the one before is done with the version (promoted it, rolled back
	// from it, or failed before its trial started). The order is the
	// values sorted, the nodes without the label last as one wave; resets
	// and undos go wave by wave too. status.waves shows the order and
	// where the rollout is. Unset: every node is one wave.
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:XValidation:rule="!format.qualifiedName().validate(self).hasValue()",message="topologyKey must be a node label key: an optional DNS subdomain prefix and '/', then a name of 1 to 63 alphanumerics, '-', '_' or '.' that starts and ends alphanumeric"
	// +optional
	TopologyKey string `json:"topologyKey,omitempty"`
	// Drains of a node before its kubelet restarts onto a change. Absent,
	// a node is drained only when a kubelet field that changes needs it
	// (docs/disruption.md), within 300 seconds.
	// +optional
	Drain *Drain `json:"drain,omitempty"`
}

// DefaultDrainTimeoutSeconds bounds a drain whose NodeConfig sets no bound.
// The CRD's default marker on drain.timeoutSeconds repeats it (a test checks).
const DefaultDrainTimeoutSeconds = 300

// Drain is how a node is drained: cordoned, its pods evicted through the
// Eviction API (their PodDisruptionBudgets hold), its kubelet restarted,
// and uncordoned once the kubelet is healthy.
type Drain struct {
	// When a node is drained: Always, before every kubelet restart of a
	// change; or Needed, only when a kubelet field that changes needs it.
	// +kubebuilder:validation:Enum=Always;Needed
	// +kubebuilder:default=Needed
	// +optional
	When string `json:"when,omitempty"`
	// How long a drain may take, in seconds (at most a day): one that
	// cannot finish within it is an early error naming the pods left, the
	// node is uncordoned and its kubelet not restarted; it is tried again
	// later.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	// +kubebuilder:default=300
	// +optional
	TimeoutSeconds int64 `json:"timeoutSeconds,omitempty"`
}

// When a node is drained (Drain.When).
const (
	DrainAlways = "Always"
	DrainNeeded = "Needed"
)

// What a halt does (Rollout.OnHalt).
const (
	OnHaltUndo = "Undo"
	OnHaltHold = "Hold"
)

// Window is a recurring maintenance window: from start to end (HH:MM; an end
// before the start wraps past midnight) on days (empty: every day), in
// timeZone (an IANA name, default UTC).
//
// +kubebuilder:validation:XValidation:rule="self.start != self.end",message="start and end must differ"
type Window struct {
	// Days the window starts on; empty means every day.
	// +kubebuilder:validation:MaxItems=7
	// +kubebuilder:validation:items:Enum=Mon;Tue;Wed;Thu;Fri;Sat;Sun
	// +optional
	Days []string `json:"days,omitempty"`
	// Local start time, HH:MM.
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	Start string `json:"start"`
	// Local end time, HH:MM; before start, the window ends the next day.
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	End string `json:"end"`
	// IANA time zone (e.g. Europe/Paris); default UTC.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
}

// NodeConfigStatus is what the reconciler observed.
type NodeConfigStatus struct {
	// The spec generation the counts and conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Ready (every selected node has this config active and last-known-good),
	// Progressing and Degraded, with the reason.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Nodes the selector matches.
	// +optional
	Selected int32 `json:"selected"`
	// Selected nodes waiting for their turn, a maintenance window or a
	// resumed rollout.
	// +optional
	Waiting int32 `json:"waiting"`
	// Selected nodes soaking the config before promoting it.
	// +optional
	Soaking int32 `json:"soaking"`
	// Selected nodes whose assigned config is active and last-known-good.
	// +optional
	Active int32 `json:"active"`
	// Selected nodes that rolled back from the assigned config.
	// +optional
	RolledBack int32 `json:"rolledBack"`
	// Selected nodes failing before their config loads (an unreachable
	// agent, a missing ConfigMap); they retry with backoff.
	// +optional
	Failing int32 `json:"failing"`
	// When the next maintenance window opens, while none is open and nodes
	// wait for one.
	// +optional
	NextWindow *metav1.Time `json:"nextWindow,omitempty"`
	// The rollout's waves, while spec.rollout.topologyKey is set.
	// +optional
	Waves *RolloutWaves `json:"waves,omitempty"`
	// Per config version (ConfigMap uid and resourceVersion, key,
	// validator), the nodes that rolled back from it; maxFailures of them
	// halt that version's rollout. A halt is a fact about a version, so it
	// is kept here, where neither a node's deletion nor a reconciler
	// fail-over loses it.
	// +optional
	RolledBackVersions []RolledBackVersion `json:"rolledBackVersions,omitempty"`
}

// MaxListedWaves bounds RolloutWaves.Order: a key with a value per node
// (kubernetes.io/hostname) would otherwise list the whole fleet.
const MaxListedWaves = 64

// RolloutWaves is the order of a rollout's waves (one per value of
// spec.rollout.topologyKey among the selected nodes) and where it is.
type RolloutWaves struct {
	// The label key the waves are by.
	TopologyKey string `json:"topologyKey"`
	// The label's values in the order their waves roll out, the first 64;
	// "" (always last) is the wave of the nodes without the label.
	// +kubebuilder:validation:MaxItems=64
	Order []string `json:"order"`
	// How many waves there are.
	Count int32 `json:"count"`
	// The wave under way, by its place in the order from 1: the one with
	// nodes on trial, else the first with a node still to take the
	// version (or to reset); 0 when there is none.
	// +optional
	Current int32 `json:"current"`
}

// RolledBackVersion is one config version — what decides whether a config
// loads: the ConfigMap version, its key and the validator, not the soak —
// and the nodes that rolled back from it.
type RolledBackVersion struct {
	// UID of the ConfigMap.
	UID string `json:"uid"`
	// ResourceVersion of the ConfigMap.
	ResourceVersion string `json:"resourceVersion"`
	// The ConfigMap key.
	Key string `json:"key"`
	// The validator the nodes used.
	Validator string `json:"validator"`
	// Names of the nodes that rolled back from this version.
	Nodes []string `json:"nodes"`
}
