package v1alpha1

// The names the components write and read on NodeConfigs and Nodes, each
// defined here once: the reconciler writes the NodeConfig's conditions and
// Events, each node's statusd its Node's condition and config-status
// annotation, and kubectl-nodeconfig explains them.

// What each node says of itself, on its Node object (written by its agent's
// statusd): the NodeConfigStatus as JSON (nodestatus.go), and one condition.
const (
	// NodeAnnotationConfigStatus holds the node's NodeConfigStatus (the shape
	// of core/v1 NodeConfigStatus: assigned, active, lastKnownGood, error).
	NodeAnnotationConfigStatus = "nodeconfig.io/config-status"
	// NodeConditionConfigReady is the node's condition type.
	NodeConditionConfigReady = "NodeConfigReady"
)

// Reasons of a Node's NodeConfigReady condition, one per lifecycle state.
// The condition also carries the reason of an error the node's records hold:
// one below, or one of the node's own (records.ReasonWriteFailed,
// ReasonKubeletNoConfigDir, ReasonConsumerUnhealthy, ReasonStartGuardFellBack,
// ReasonHealthGateFailed, which checkpointd records, defined beside the
// protobuf contract in nodeconfig.io/proto/nodeconfig/records).
const (
	// NodeReasonLocalDefault: nothing is assigned; the node uses its local
	// default.
	NodeReasonLocalDefault = "LocalDefault"
	// NodeReasonSoaking: the assigned config is active and on trial.
	NodeReasonSoaking = "Soaking"
	// NodeReasonActive: the assigned config is active and last-known-good.
	NodeReasonActive = "Active"
	// NodeReasonRolledBack: the assigned config failed to load or validate;
	// last-known-good is active.
	NodeReasonRolledBack = "RolledBack"
	// NodeReasonActivating: the config is assigned and about to be
	// activated.
	NodeReasonActivating = "Activating"
	// NodeReasonRestarting: the consumer (the kubelet) is being restarted
	// onto the active config; the soak has not begun.
	NodeReasonRestarting = "Restarting"
	// NodeReasonWaitingForHealth: the consumer was restarted onto the
	// active config and is not healthy yet; the soak has not begun.
	NodeReasonWaitingForHealth = "WaitingForHealth"
	// NodeReasonDraining: the assigned change needs a drain first: the
	// node is cordoned and its pods evicted; nothing is written yet.
	NodeReasonDraining = "Draining"
	// NodeReasonCheckpointdUnavailable: the node's checkpointd cannot be
	// reached (by its statusd, or by the reconciler, whose error on the
	// node starts with it).
	NodeReasonCheckpointdUnavailable = "CheckpointdUnavailable"
	// NodeReasonDownloadFailed: the early error the reconciler records on a
	// node whose config it cannot read (the ConfigMap or its key missing).
	NodeReasonDownloadFailed = "DownloadFailed"
	// NodeReasonCheckpointFailed: the early error the reconciler records on
	// a node that cannot checkpoint the assigned config.
	NodeReasonCheckpointFailed = "CheckpointFailed"
)

// Annotations users set on a NodeConfig, and the marks the reconciler puts
// on NodeConfigs and Nodes.
const (
	// AnnotationReconcileInterval is the mean periodic reconcile interval in
	// seconds (jittered 0.5x-1.5x); 0 stops periodic reconciles once a node is
	// up to date.
	AnnotationReconcileInterval = "nodeconfig.io/reconcile-interval-in-seconds"
	// AnnotationDeletionPolicy "abandon" leaves nodes on their config when the
	// NodeConfig is deleted; otherwise they are reset to local defaults.
	AnnotationDeletionPolicy = "nodeconfig.io/deletion-policy"
	DeletionPolicyAbandon    = "abandon"
	// AnnotationResetNow "true" is the emergency exit: the nodes a
	// NodeConfig lets go (deleted, or its source removed) reset at once,
	// past maxInTrial, a pause and the windows, instead of one trial at a
	// time.
	AnnotationResetNow = "nodeconfig.io/reset-now"
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
	// ReasonValidationUnavailable: the NodeConfig's validator could not
	// run in the reconciler (its binary missing, crashed or too slow); the
	// current payload is assigned to no node until it runs, retried with
	// backoff.
	ReasonValidationUnavailable = "ValidationUnavailable"
	// ReasonPaused: spec.rollout.paused holds new trials.
	ReasonPaused = "Paused"
	// ReasonOutsideWindow: no maintenance window is open; the status says
	// when the next one opens.
	ReasonOutsideWindow = "OutsideMaintenanceWindow"
	// ReasonInvalidWindow: a maintenance window does not parse; no trial
	// starts until it is fixed.
	ReasonInvalidWindow = "InvalidMaintenanceWindow"
	// ReasonInvalidHealthGate: spec.health.cel does not compile; no trial
	// starts until it is fixed.
	ReasonInvalidHealthGate = "InvalidHealthGate"
	// ReasonNodesFailing: nodes fail with early errors (unreachable
	// agents, a missing ConfigMap); they retry with backoff.
	ReasonNodesFailing = "NodesFailing"
	// ReasonAsExpected (Degraded=False): no node rolled back or failing.
	ReasonAsExpected = "AsExpected"
	// ReasonRollingOut (Progressing=True, Ready=False): selected nodes are
	// not on the config yet.
	ReasonRollingOut = "RollingOut"
	// ReasonRolloutComplete (Progressing=False): every selected node uses
	// the config.
	ReasonRolloutComplete = "RolloutComplete"
	// ReasonUndoingHaltedVersion (Progressing=True): the version halted and
	// spec.rollout.onHalt is Undo: the nodes that took it go back to the
	// last revision promoted everywhere; the message says how far.
	ReasonUndoingHaltedVersion = "UndoingHaltedVersion"
	// ReasonHaltedVersionUndone (Progressing=False): every selected node
	// runs that revision again.
	ReasonHaltedVersionUndone = "HaltedVersionUndone"
	// ReasonAllNodesActive (Ready=True): every selected node has the config
	// active and last-known-good.
	ReasonAllNodesActive = "AllNodesActive"
)

// Reasons of the Events the reconciler records. Those of a node's
// transitions are recorded on the Node (and, for warnings, on its
// NodeConfig too); a NodeConfig's Warning about itself takes the reason of
// its Degraded condition.
const (
	// EventConfigAssigned: a config (or the local default) was assigned to
	// the node.
	EventConfigAssigned = "ConfigAssigned"
	// EventConfigActivated: the node activated the assigned config.
	EventConfigActivated = "ConfigActivated"
	// EventConfigPromoted: the config soaked and is last-known-good.
	EventConfigPromoted = "ConfigPromoted"
	// EventConfigRolledBack (Warning): the node rolled back from the
	// assigned config.
	EventConfigRolledBack = "ConfigRolledBack"
	// EventDriftCorrected (Warning): the node's config file differed from
	// its active checkpoint and was rewritten.
	EventDriftCorrected = "DriftCorrected"
	// EventUpdateFailed (Warning): a sync of the node failed with an early
	// error; it is retried with backoff.
	EventUpdateFailed = "UpdateFailed"
	// EventRolloutComplete (on a NodeConfig): the rollout became Ready, its
	// Progressing condition's reason.
	EventRolloutComplete = ReasonRolloutComplete
)

// The agents' serving certificates: each agent asks the CertificateSigningRequest
// API for one naming its node, and the reconciler approves, signs and checks
// that name (docs/decisions.md, "A serving certificate per agent").
const (
	// AgentServingSigner is the signerName of the agents' CSRs; the
	// reconciler signs for it alone.
	AgentServingSigner = "nodeconfig.io/agent-serving"
	// AgentServingNameSuffix follows the node's name in the DNS name its
	// agent's certificate carries and the reconciler checks: node-a's agent
	// is node-a.agent.nodeconfig.io. The suffix keeps it a DNS name even for
	// a node named like an IP address.
	AgentServingNameSuffix = ".agent.nodeconfig.io"
)
