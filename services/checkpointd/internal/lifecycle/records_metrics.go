package lifecycle

import (
	"github.com/prometheus/client_golang/prometheus"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// The node's config as Dynamic Kubelet Config's kubelet reported it
// (KEP-281: node_config_assigned, _active, _last_known_good, _error), read
// from the durable records at each scrape so they never disagree with them.
// The ConfigMap's labels are configmap_*: Prometheus sets namespace (the
// agent Pod's) on every series it scrapes, and the node label comes from
// the scrape too (the PodMonitor's relabeling).
var (
	sourceLabels       = []string{"configmap_namespace", "configmap_name", "uid", "resource_version", "key"}
	configAssignedDesc = prometheus.NewDesc("nodeconfig_node_config_assigned", "1 for the config assigned to this node (labels name its ConfigMap version; all empty: the local default).", sourceLabels, nil)
	configActiveDesc   = prometheus.NewDesc("nodeconfig_node_config_active", "1 for the config this node uses (labels as for assigned).", sourceLabels, nil)
	configLKGDesc      = prometheus.NewDesc("nodeconfig_node_config_last_known_good", "1 for the config this node falls back to (labels as for assigned).", sourceLabels, nil)
	configErrorDesc    = prometheus.NewDesc("nodeconfig_node_config_error", "1 while an error stops the assigned config from being active, 0 otherwise; reason and phase (early, late) label it.", []string{"reason", "phase"}, nil)
	configSoakEndDesc  = prometheus.NewDesc("nodeconfig_node_config_soak_end_seconds", "When the assigned config's soak ends (Unix seconds); absent while none runs.", nil, nil)
)

// RecordsReader reads the node's records.
type RecordsReader interface {
	Records() (*nodeconfigv1.Records, error)
}

// RecordsCollector exposes the node's records as DKC's config metrics.
type RecordsCollector struct{ Store RecordsReader }

// Describe implements prometheus.Collector.
func (RecordsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{configAssignedDesc, configActiveDesc, configLKGDesc, configErrorDesc, configSoakEndDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c RecordsCollector) Collect(ch chan<- prometheus.Metric) {
	recs, err := c.Store.Records()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(configAssignedDesc, err)
		return
	}
	source := func(d *prometheus.Desc, src *nodeconfigv1.ConfigSource) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, 1,
			src.GetNamespace(), src.GetName(), src.GetUid(), src.GetResourceVersion(), src.GetKey())
	}
	source(configAssignedDesc, recs.GetAssigned().GetSource())
	source(configActiveDesc, recs.GetActive().GetSource())
	source(configLKGDesc, recs.GetLastKnownGood().GetSource())
	e := recs.GetError().GetError()
	value := 0.0
	phase := ""
	if e != nil {
		value = 1
		phase = map[nodeconfigv1.ErrorPhase]string{nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY: "early", nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE: "late"}[e.GetPhase()]
	}
	ch <- prometheus.MustNewConstMetric(configErrorDesc, prometheus.GaugeValue, value, e.GetReason(), phase)
	if end := records.SoakEnd(recs); records.Soaking(recs) && !end.IsZero() {
		ch <- prometheus.MustNewConstMetric(configSoakEndDesc, prometheus.GaugeValue, float64(end.Unix()))
	}
}
