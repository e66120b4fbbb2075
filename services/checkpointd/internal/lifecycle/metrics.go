package lifecycle

import "github.com/prometheus/client_golang/prometheus"

// Metrics are checkpointd's Prometheus series.
type Metrics struct {
	checkpointsStored prometheus.Gauge
	checkpointBytes   prometheus.Gauge
	activations       prometheus.Counter
	rollbacks         prometheus.Counter
	driftRepairs      prometheus.Counter
	commitSeconds     prometheus.Histogram
	watchers          prometheus.Gauge
	sweeps            prometheus.Counter
}

// NewMetrics registers the series on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		checkpointsStored: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodeconfig_checkpoints", Help: "Checkpoints in the store."}),
		checkpointBytes:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodeconfig_checkpoint_bytes", Help: "Bytes of payload in the store."}),
		activations:       prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeconfig_activations_total", Help: "Successful activations of the assigned config."}),
		rollbacks:         prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeconfig_rollbacks_total", Help: "Rollbacks to last-known-good after a late error."}),
		driftRepairs:      prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeconfig_drift_repairs_total", Help: "Times the target file was missing or differed and was rewritten."}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "nodeconfig_checkpoint_commit_seconds", Help: "Time to durably store a new checkpoint.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		watchers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodeconfig_record_watchers", Help: "Open WatchRecords streams."}),
		sweeps: prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeconfig_checkpoint_sweeps_total",
			Help: "Completed sweeps of unreferenced checkpoints (one per --gc-interval), whether or not they removed any."}),
	}
	if reg != nil {
		reg.MustRegister(m.checkpointsStored, m.checkpointBytes, m.activations, m.rollbacks, m.driftRepairs, m.commitSeconds, m.watchers, m.sweeps)
	}
	return m
}
