package controller

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeconfig.io/services/api/v1alpha1"
)

// A NodeConfig's series follow its status, and go with it.
func TestNodeConfigSeriesFollowTheStatus(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	m.observeNodeConfig("pool-a", v1alpha1.NodeConfigStatus{Selected: 5, Waiting: 3, Soaking: 1, RolledBack: 1, Conditions: []metav1.Condition{
		{Type: v1alpha1.ConditionDegraded, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonRolloutHalted},
		{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonPaused},
	}})
	for _, c := range []struct {
		got  float64
		want float64
		what string
	}{
		{testutil.ToFloat64(m.rolloutNodes.WithLabelValues("pool-a", "waiting")), 3, "waiting"},
		{testutil.ToFloat64(m.rolloutNodes.WithLabelValues("pool-a", "rolled_back")), 1, "rolled_back"},
		{testutil.ToFloat64(m.rolloutHalted.WithLabelValues("pool-a")), 1, "halted"},
		{testutil.ToFloat64(m.rolloutHeld.WithLabelValues("pool-a", v1alpha1.ReasonPaused)), 1, "held Paused"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	// Resumed and healed: no held series, not halted.
	m.observeNodeConfig("pool-a", v1alpha1.NodeConfigStatus{Selected: 5, Active: 5})
	if n := testutil.CollectAndCount(m.rolloutHeld); n != 0 {
		t.Errorf("%d held series after resume, want 0", n)
	}
	if v := testutil.ToFloat64(m.rolloutHalted.WithLabelValues("pool-a")); v != 0 {
		t.Errorf("halted = %v after healing", v)
	}
	// A payload the reconciler's validator refuses.
	m.observeNodeConfig("pool-a", v1alpha1.NodeConfigStatus{Selected: 5, Active: 5, Conditions: []metav1.Condition{
		{Type: v1alpha1.ConditionDegraded, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonConfigRefused},
	}})
	if v := testutil.ToFloat64(m.rolloutRefused.WithLabelValues("pool-a")); v != 1 {
		t.Errorf("refused = %v while the reconciler refuses the payload, want 1", v)
	}
	m.forgetNodeConfig("pool-a")
	if n := testutil.CollectAndCount(m.rolloutNodes) + testutil.CollectAndCount(m.rolloutHalted) + testutil.CollectAndCount(m.rolloutRefused); n != 0 {
		t.Errorf("%d series left after the NodeConfig went", n)
	}
}
