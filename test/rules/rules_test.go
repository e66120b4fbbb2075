// Package rules tests the alerts of deploy/components/prometheus with
// promtool: the rules load, each fires and stays quiet as its unit tests
// (testdata/alerts_test.yaml) say, and each has a severity and a runbook.
package rules

import (
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"

	"nodeconfig.io/test/framework/proc"
)

// prometheusRule is the part of the PrometheusRule that Prometheus loads:
// its groups, which a rules file holds as they are.
type prometheusRule struct {
	Spec struct {
		Groups []ruleGroup `json:"groups"`
	} `json:"spec"`
}

type ruleGroup struct {
	Name  string `json:"name"`
	Rules []rule `json:"rules"`
}

type rule struct {
	Alert       string            `json:"alert"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// unitTests is the part of promtool's test file that says which alert
// each case expects.
type unitTests struct {
	Tests []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			AlertName string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

func TestAlertRules(t *testing.T) {
	root, err := proc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "components", "prometheus", "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pr prometheusRule
	if err := yaml.Unmarshal(raw, &pr); err != nil {
		t.Fatal(err)
	}
	// The groups exactly as written, for promtool: through a generic map,
	// so that no field this test does not know is dropped.
	var generic map[string]any
	if err := yaml.Unmarshal(raw, &generic); err != nil {
		t.Fatal(err)
	}
	spec, _ := generic["spec"].(map[string]any)
	rulesFile, err := yaml.Marshal(map[string]any{"groups": spec["groups"]})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "nodeconfig-rules.yaml"), rulesFile, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join("testdata", "alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}

	promtoolRun(t, root, dir, "check", "rules", "nodeconfig-rules.yaml")
	promtoolRun(t, root, dir, "test", "rules", "alerts_test.yaml")

	var ut unitTests
	if err := yaml.Unmarshal(tests, &ut); err != nil {
		t.Fatal(err)
	}
	firing, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range ut.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				firing[a.AlertName] = true
			} else {
				quiet[a.AlertName] = true
			}
		}
	}
	alerts := map[string]bool{}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts[r.Alert] = true
			switch r.Labels["severity"] {
			case "critical", "warning":
			default:
				t.Errorf("alert %s: severity %q, want critical or warning", r.Alert, r.Labels["severity"])
			}
			want := "docs/runbooks/" + r.Alert + ".md"
			if got := r.Annotations["runbook_url"]; got != want {
				t.Errorf("alert %s: runbook_url %q, want %q", r.Alert, got, want)
			} else if _, err := os.Stat(filepath.Join(root, want)); err != nil {
				t.Errorf("alert %s: its runbook: %v", r.Alert, err)
			}
			if !firing[r.Alert] || !quiet[r.Alert] {
				t.Errorf("alert %s: testdata/alerts_test.yaml must show it firing (%v) and not firing (%v)", r.Alert, firing[r.Alert], quiet[r.Alert])
			}
		}
	}
	// A runbook outlives no alert.
	pages, err := filepath.Glob(filepath.Join(root, "docs", "runbooks", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		name := filepath.Base(p)
		if name == "README.md" {
			continue
		}
		if !alerts[name[:len(name)-len(".md")]] {
			t.Errorf("docs/runbooks/%s names no alert of rules.yaml", name)
		}
	}
}
