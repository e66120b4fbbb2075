package status

import (
	"strings"

	"nodeconfig.io/proto/nodeconfig/records"
	"nodeconfig.io/services/api/v1alpha1"
)

// Outcomes group a NodeConfig's nodes by where its rollout left them, in
// the order status lists them: what needs a look first.
const (
	OutcomeRefused    = "Refused"
	OutcomeFailed     = "Failed"
	OutcomeConflict   = "Conflict"
	OutcomeTrial      = "Trial"
	OutcomeWaiting    = "Waiting"
	OutcomeActive     = "Active"
	OutcomeUnreported = "Unreported"
)

// Outcomes are every outcome, in the order status lists them.
var Outcomes = []string{OutcomeRefused, OutcomeFailed, OutcomeConflict, OutcomeTrial, OutcomeWaiting, OutcomeActive, OutcomeUnreported}

var outcomeMeanings = map[string]string{
	OutcomeRefused:    "refused the assigned config and run their last-known-good",
	OutcomeFailed:     "an early error (download, checkpoint, write, agent unreachable), retried with backoff; nothing rolled back",
	OutcomeConflict:   "selected by two or more NodeConfigs: they take neither",
	OutcomeTrial:      "activating the assigned config, or soaking on it",
	OutcomeWaiting:    "not given the config yet: pacing, a pause, a window or a halt holds them",
	OutcomeActive:     "the assigned config is active and last-known-good",
	OutcomeUnreported: "the node's agent has not reported yet",
}

// OutcomeMeaning says what an outcome means.
func OutcomeMeaning(o string) string { return outcomeMeanings[o] }

// Node phases (NodeConfigReady reasons) by the outcome they mean.
var (
	refusedPhases = map[string]bool{v1alpha1.NodeReasonRolledBack: true, records.ReasonConsumerUnhealthy: true,
		records.ReasonHealthGateFailed: true, records.ReasonStartGuardFellBack: true}
	trialPhases = map[string]bool{v1alpha1.NodeReasonActivating: true, v1alpha1.NodeReasonRestarting: true,
		v1alpha1.NodeReasonWaitingForHealth: true, v1alpha1.NodeReasonSoaking: true}
)

// outcomeOf places a node from what it says (its NodeConfigReady reason
// and status) and what the reconciler says of it (its lifecycle state, ""
// when unknown). hasSource is whether its NodeConfig names a ConfigMap,
// without which the local default is where the node should be.
func outcomeOf(phase, ready, state string, hasSource bool) string {
	switch {
	case refusedPhases[phase] || state == "ROLLED_BACK":
		return OutcomeRefused
	case state == "CONFLICT":
		return OutcomeConflict
	case phase == v1alpha1.NodeReasonCheckpointdUnavailable || (phase != "" && ready == "False") || state == "FAILING":
		// Every other False is an early error (statusd's reason is the
		// error's).
		return OutcomeFailed
	case trialPhases[phase] || state == "SOAKING":
		return OutcomeTrial
	case state == "WAITING" || state == "HALTED" || (phase == v1alpha1.NodeReasonLocalDefault && hasSource):
		return OutcomeWaiting
	case phase == v1alpha1.NodeReasonActive || phase == v1alpha1.NodeReasonLocalDefault:
		return OutcomeActive
	case phase == "":
		return OutcomeUnreported
	case ready == "True":
		// A reason this plugin predates, by the condition's status.
		return OutcomeActive
	default:
		return OutcomeTrial
	}
}

// Matches says whether a node shows under a --phase filter: its outcome or
// its phase, in any case.
func (n NodeRow) Matches(phases []string) bool {
	if len(phases) == 0 {
		return true
	}
	for _, p := range phases {
		if strings.EqualFold(p, n.Outcome) || strings.EqualFold(p, n.Phase) {
			return true
		}
	}
	return false
}
