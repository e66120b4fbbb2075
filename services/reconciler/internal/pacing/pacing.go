// Package pacing decides how fast a new config version spreads over the
// nodes a NodeConfig selects: at most maxInTrial nodes soak at once, and a
// version stops spreading once maxFailures nodes rolled back from it.
package pacing

import (
	"k8s.io/apimachinery/pkg/util/intstr"
)

// DefaultMaxInTrial is the pace of a NodeConfig that names none: a tenth
// of its nodes at once, at least one. A bad config that passes every check
// but the node's own costs at most that tenth before maxFailures halts it,
// small pools start with a single canary, and a large fleet still finishes
// in about ten soaks.
var DefaultMaxInTrial = intstr.FromString("10%")

// MaxInTrial resolves spec.rollout.maxInTrial (a count or a percentage of
// the selected nodes, rounded up) to a count of at least 1. Nil is
// DefaultMaxInTrial.
func MaxInTrial(v *intstr.IntOrString, selected int) int {
	if v == nil {
		v = &DefaultMaxInTrial
	}
	if selected == 0 {
		return 1
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, selected, true)
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// MaxFailures resolves spec.rollout.maxFailures: nil is 1, 0 never halts.
func MaxFailures(v *int32) int {
	if v == nil {
		return 1
	}
	return int(*v)
}

// Halted reports whether rolledBack rollbacks of one version halt it.
func Halted(rolledBack, maxFailures int) bool {
	return maxFailures > 0 && rolledBack >= maxFailures
}
