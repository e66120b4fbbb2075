package controller

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"

	"nodeconfig.io/services/api/v1alpha1"
)

// Metrics are the reconciler's Prometheus series. Create them once per
// process: a replica may lead, lose the lease and lead again. Its gauges
// say what the leader sees; a replica exports them only while it leads.
type Metrics struct {
	syncs        *prometheus.CounterVec
	syncSeconds  *prometheus.HistogramVec
	queueDepth   *prometheus.GaugeVec // no labels: a vector so that a replica not leading exports none
	nodesByState *prometheus.GaugeVec
	rollbacks    prometheus.Counter
	promotions   prometheus.Counter
	// Per NodeConfig, what its status says, for alerts: nodes by state, a
	// halted rollout, a rollout held (paused, outside its windows).
	rolloutNodes   *prometheus.GaugeVec
	rolloutHalted  *prometheus.GaugeVec
	rolloutRefused *prometheus.GaugeVec
	rolloutHeld    *prometheus.GaugeVec
}

// NewMetrics registers the series on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		syncs:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nodeconfig_reconciler_syncs_total", Help: "Syncs by queue and result."}, []string{"queue", "result"}),
		syncSeconds:  prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "nodeconfig_reconciler_sync_seconds", Help: "Time of one sync.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"queue"}),
		queueDepth:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nodeconfig_reconciler_queue_depth", Help: "Nodes waiting in the work queue."}, nil),
		nodesByState: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nodeconfig_reconciler_nodes", Help: "Nodes by lifecycle state."}, []string{"state"}),
		rollbacks:    prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeconfig_reconciler_rollbacks_total", Help: "Rollbacks seen after an activation."}),
		promotions:   prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeconfig_reconciler_promotions_total", Help: "Configs promoted to last-known-good."}),
		rolloutNodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nodeconfig_rollout_nodes",
			Help: "Nodes a NodeConfig selects, by state (selected, waiting, soaking, active, rolled_back, failing), as its status says."}, []string{"nodeconfig", "state"}),
		rolloutHalted: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nodeconfig_rollout_halted",
			Help: "1 while a NodeConfig's current version is halted by maxFailures rollbacks."}, []string{"nodeconfig"}),
		rolloutRefused: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nodeconfig_rollout_refused",
			Help: "1 while a NodeConfig's current payload fails its validator in the reconciler and is assigned to no node."}, []string{"nodeconfig"}),
		rolloutHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nodeconfig_rollout_held",
			Help: "1 while nodes of a NodeConfig wait because it is paused, outside its maintenance windows, or its windows do not parse (reason)."}, []string{"nodeconfig", "reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.syncs, m.syncSeconds, m.queueDepth, m.nodesByState, m.rollbacks, m.promotions, m.rolloutNodes, m.rolloutHalted, m.rolloutRefused, m.rolloutHeld)
	}
	return m
}

// observeNodeConfig sets a NodeConfig's series from the status it was
// just given.
func (m *Metrics) observeNodeConfig(name string, st v1alpha1.NodeConfigStatus) {
	for state, n := range map[string]int32{"selected": st.Selected, "waiting": st.Waiting, "soaking": st.Soaking,
		"active": st.Active, "rolled_back": st.RolledBack, "failing": st.Failing} {
		m.rolloutNodes.WithLabelValues(name, state).Set(float64(n))
	}
	halted, refused := 0.0, 0.0
	if d := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionDegraded); d != nil {
		switch d.Reason {
		case v1alpha1.ReasonRolloutHalted:
			halted = 1
		case v1alpha1.ReasonConfigRefused:
			refused = 1
		}
	}
	m.rolloutHalted.WithLabelValues(name).Set(halted)
	m.rolloutRefused.WithLabelValues(name).Set(refused)
	m.rolloutHeld.DeletePartialMatch(prometheus.Labels{"nodeconfig": name})
	if p := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionProgressing); p != nil {
		switch p.Reason {
		case v1alpha1.ReasonPaused, v1alpha1.ReasonOutsideWindow, v1alpha1.ReasonInvalidWindow, v1alpha1.ReasonInvalidHealthGate:
			m.rolloutHeld.WithLabelValues(name, p.Reason).Set(1)
		}
	}
}

// forgetNodeConfig drops the series of a NodeConfig that is gone.
func (m *Metrics) forgetNodeConfig(name string) {
	for _, v := range []*prometheus.GaugeVec{m.rolloutNodes, m.rolloutHalted, m.rolloutRefused, m.rolloutHeld} {
		v.DeletePartialMatch(prometheus.Labels{"nodeconfig": name})
	}
}

// forgetLeadership drops every gauge of the leadership that ended: the
// replica no longer knows, and alerts that take the maximum across
// replicas see the new leader's values alone. Counters stay: they count
// what this process did.
func (m *Metrics) forgetLeadership() {
	for _, v := range []*prometheus.GaugeVec{m.queueDepth, m.nodesByState, m.rolloutNodes, m.rolloutHalted, m.rolloutRefused, m.rolloutHeld} {
		v.Reset()
	}
}

// The names of the controller's work queues, which client-go's work queue
// metrics are labelled with.
const (
	NodeQueue       = "nodes"
	NodeConfigQueue = "nodeconfigs"
)
