package lifecycle

import (
	"strings"
	"testing"

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
nodeconfig_node_config_active{key="config.yaml",name="cm",namespace="ns",resource_version="2",uid="uid-1"} 1
# HELP nodeconfig_node_config_error 1 while an error stops the assigned config from being active, 0 otherwise; reason and phase (early, late) label it.
# TYPE nodeconfig_node_config_error gauge
nodeconfig_node_config_error{phase="",reason=""} 0
# HELP nodeconfig_node_config_last_known_good 1 for the config this node falls back to (labels as for assigned).
# TYPE nodeconfig_node_config_last_known_good gauge
nodeconfig_node_config_last_known_good{key="config.yaml",name="cm",namespace="ns",resource_version="1",uid="uid-1"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "nodeconfig_node_config_active", "nodeconfig_node_config_last_known_good", "nodeconfig_node_config_error"); err != nil {
		t.Fatal(err)
	}
}
