package controller

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"nodeconfig.io/services/api/v1alpha1"
)

// DefaultReconcileInterval is the mean periodic reconcile, as Config
// Connector reconciles its resources.
const DefaultReconcileInterval = 10 * time.Minute

// reconcileInterval reads the NodeConfig's annotation; 0 means no periodic
// reconcile once up to date. An invalid value means the default, and the
// NodeConfig reports it (reconcileIntervalErr).
func reconcileInterval(nc *v1alpha1.NodeConfig) time.Duration {
	iv, _ := parseReconcileInterval(nc)
	return iv
}

// reconcileIntervalErr says what is wrong with the annotation; nil when it
// is absent or valid.
func reconcileIntervalErr(nc *v1alpha1.NodeConfig) error {
	_, err := parseReconcileInterval(nc)
	return err
}

func parseReconcileInterval(nc *v1alpha1.NodeConfig) (time.Duration, error) {
	if nc == nil {
		return DefaultReconcileInterval, nil
	}
	v, ok := nc.Annotations[v1alpha1.AnnotationReconcileInterval]
	if !ok {
		return DefaultReconcileInterval, nil
	}
	secs, err := strconv.ParseInt(v, 10, 64)
	if err != nil || secs < 0 || secs > math.MaxInt64/int64(time.Second) {
		return DefaultReconcileInterval, fmt.Errorf("annotation %s is %q, not a whole number of seconds >= 0 (0 turns the periodic reconcile off); using the default of %d s until it is fixed",
			v1alpha1.AnnotationReconcileInterval, v, int64(DefaultReconcileInterval/time.Second))
	}
	return time.Duration(secs) * time.Second, nil
}
