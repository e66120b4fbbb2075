package rollout

import (
	"fmt"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/configcheck/healthcel"
)

// healthGates are a NodeConfig's health gates as its nodes get them, and
// why they cannot be gates: a CEL expression that does not compile is
// refused here, before any node is assigned a trial it would judge.
func healthGates(h *v1alpha1.HealthGates) (*nodeconfigv1.HealthGates, error) {
	if h == nil {
		return nil, nil
	}
	gates := &nodeconfigv1.HealthGates{Cel: h.CEL}
	for _, c := range h.Conditions {
		gates.Conditions = append(gates.Conditions, &nodeconfigv1.NodeConditionGate{Type: c.Type, Status: c.Status})
	}
	if p := h.Prometheus; p != nil {
		gates.Prometheus = &nodeconfigv1.PrometheusGate{Url: p.URL, Query: p.Query}
	}
	if h.CEL != "" {
		if _, err := healthcel.Compile(h.CEL); err != nil {
			return nil, fmt.Errorf("spec.health.cel %w", err)
		}
	}
	return gates, nil
}
