package lifecycle

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The DKC-style series say what the durable records say: the assigned,
// active and last-known-good versions, and no error.
func TestRecordsCollectorReportsTheDurableRecords(t *testing.T) {
	f := newFixture(t)
	f.assign(t, "1", "a: 1\n")
	f.promote(t, "1")
	f.assign(t, "2", "a: 2\n")
	c := RecordsCollector{Store: f.store}
	want := `
# HELP nodeconfig_node_config_active 1 for the config this node uses (labels as for assigned).
# TYPE nodeconfig_node_config_active gauge
nodeconfig_node_config_active{configmap_name="cm",configmap_namespace="ns",key="config.yaml",resource_version="2",uid="uid-1"} 1
# HELP nodeconfig_node_config_error 1 while an error stops the assigned config from being active, 0 otherwise; reason and phase (early, late) label it.
# TYPE nodeconfig_node_config_error gauge
nodeconfig_node_config_error{phase="",reason=""} 0
# HELP nodeconfig_node_config_last_known_good 1 for the config this node falls back to (labels as for assigned).
# TYPE nodeconfig_node_config_last_known_good gauge
nodeconfig_node_config_last_known_good{configmap_name="cm",configmap_namespace="ns",key="config.yaml",resource_version="1",uid="uid-1"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "nodeconfig_node_config_active", "nodeconfig_node_config_last_known_good", "nodeconfig_node_config_error"); err != nil {
		t.Fatal(err)
	}
	// Prometheus sets these on every scraped series (target labels): a
	// series' own label of the same name would be renamed exported_NAME.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "namespace", "pod", "node", "instance", "job", "container", "endpoint", "service":
					t.Errorf("%s has a label %q, which Prometheus's target labels overwrite", f.GetName(), l.GetName())
				}
			}
		}
	}
}
