package controller

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the reconciler's Prometheus series. Create them once per
// process: a replica may lead, lose the lease and lead again.
type Metrics struct {
	syncs        *prometheus.CounterVec
	syncSeconds  *prometheus.HistogramVec
	queueDepth   prometheus.Gauge
	nodesByState *prometheus.GaugeVec
	rollbacks    prometheus.Counter
	promotions   prometheus.Counter
}

// NewMetrics registers the series on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		syncs:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nodeconfig_reconciler_syncs_total", Help: "Syncs by queue and result."}, []string{"queue", "result"}),
		syncSeconds:  prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "nodeconfig_reconciler_sync_seconds", Help: "Time of one sync.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"queue"}),
		queueDepth:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodeconfig_reconciler_queue_depth", Help: "Nodes waiting in the work queue."}),
		nodesByState: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nodeconfig_reconciler_nodes", Help: "Nodes by lifecycle state."}, []string{"state"}),
		rollbacks:    prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeconfig_reconciler_rollbacks_total", Help: "Rollbacks seen after an activation."}),
		promotions:   prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeconfig_reconciler_promotions_total", Help: "Configs promoted to last-known-good."}),
	}
	if reg != nil {
		reg.MustRegister(m.syncs, m.syncSeconds, m.queueDepth, m.nodesByState, m.rollbacks, m.promotions)
	}
	return m
}
