package rules

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"sigs.k8s.io/yaml"

	"nodeconfig.io/test/framework/proc"
)

// dashboard is the part of Grafana's dashboard JSON that holds queries.
type dashboard struct {
	Panels []panel `json:"panels"`
}

type panel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// The Grafana dashboard: every query parses as PromQL (promtool checks it
// as a recording rule) and names only metrics the services export, or
// Prometheus's own up.
func TestDashboardQueriesTheServicesMetrics(t *testing.T) {
	root, err := proc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "components", "prometheus", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	exprs := map[string]string{} // expression -> its panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				exprs[tg.Expr] = p.Title
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	if len(exprs) < 10 {
		t.Fatalf("the dashboard has %d queries", len(exprs))
	}

	// Each query as a recording rule, with Grafana's interval variable
	// given a value: promtool parses each.
	var rules []map[string]string
	for _, e := range slices.Sorted(maps.Keys(exprs)) {
		rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard:query_%d", len(rules)), "expr": promQL(e)})
	}
	file, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard-rules.yaml"), file, 0o644); err != nil {
		t.Fatal(err)
	}
	promtoolRun(t, root, dir, "check", "rules", "dashboard-rules.yaml")

	exported := exportedMetrics(t, filepath.Join(root, "services"))
	exported["up"] = true // Prometheus's, per target
	for e, title := range exprs {
		for _, name := range metricNames(promQL(e)) {
			if !exported[name] && !exported[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")] {
				t.Errorf("panel %q queries %s, which no service exports: %s", title, name, e)
			}
		}
	}
}

// promQL is a Grafana query with its variables given values.
func promQL(expr string) string {
	return strings.ReplaceAll(expr, "$__rate_interval", "5m")
}

var (
	quoted   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	braces   = regexp.MustCompile(`\{[^}]*\}`)
	brackets = regexp.MustCompile(`\[[^\]]*\]`)
	// Label lists of by, without, on, ignoring, group_left, group_right.
	labelLists = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	ident      = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
)

// keywords are PromQL's words that are not metric names (functions are
// known by the parenthesis that follows them).
var keywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true,
	"without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true}

// metricNames are the metric names an expression selects. The expression
// parsed (promtool said so): its strings, matchers, ranges and label lists
// are cut out, and what is left that names no function is a metric.
func metricNames(expr string) []string {
	s := quoted.ReplaceAllString(expr, `""`)
	s = braces.ReplaceAllString(s, " ")
	s = brackets.ReplaceAllString(s, " ")
	s = labelLists.ReplaceAllString(s, " ")
	var out []string
	for _, loc := range ident.FindAllStringIndex(s, -1) {
		word := s[loc[0]:loc[1]]
		rest := strings.TrimLeft(s[loc[1]:], " ")
		if keywords[strings.ToLower(word)] || strings.HasPrefix(rest, "(") {
			continue
		}
		if loc[0] > 0 && (s[loc[0]-1] >= '0' && s[loc[0]-1] <= '9' || s[loc[0]-1] == '.') {
			continue // the exponent or unit of a number
		}
		out = append(out, word)
	}
	return out
}

// exportedMetrics are the names the services register: every
// prometheus.*Opts literal's Name and prometheus.NewDesc's first argument
// in their code, and the names of the library collectors servekit
// registers on every service (gRPC server metrics, Go and process).
func exportedMetrics(t *testing.T, services string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	err := filepath.WalkDir(services, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				if sel, ok := n.Type.(*ast.SelectorExpr); ok && isPkg(sel.X, "prometheus") && strings.HasSuffix(sel.Sel.Name, "Opts") {
					for _, el := range n.Elts {
						if kv, ok := el.(*ast.KeyValueExpr); ok && isIdent(kv.Key, "Name") {
							if name, ok := stringLit(kv.Value); ok {
								out[name] = true
							}
						}
					}
				}
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && isPkg(sel.X, "prometheus") && sel.Sel.Name == "NewDesc" && len(n.Args) > 0 {
					if name, ok := stringLit(n.Args[0]); ok {
						out[name] = true
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !out["nodeconfig_rollout_nodes"] || !out["nodeconfig_node_config_error"] {
		t.Fatalf("the scan of %s found no rollout or node metrics: %v", services, out)
	}
	grpc := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
	for _, c := range []prometheus.Collector{grpc, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		descs := make(chan *prometheus.Desc, 100)
		go func() { c.Describe(descs); close(descs) }()
		for d := range descs {
			// A Desc names itself only in its String: fqName: "name".
			if m := fqName.FindStringSubmatch(d.String()); m != nil {
				out[m[1]] = true
			}
		}
	}
	return out
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func isPkg(e ast.Expr, name string) bool { return isIdent(e, name) }

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// The extraction of metric names, on the shapes the dashboard uses.
func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum(nodeconfig_reconciler_leader)`:                                                                 {"nodeconfig_reconciler_leader"},
		`max by (nodeconfig, state) (nodeconfig_rollout_nodes{state="rolled_back"}) > 0`:                    {"nodeconfig_rollout_nodes"},
		`histogram_quantile(0.99, sum by (le) (rate(nodeconfig_statusd_sync_seconds_bucket[5m])))`:          {"nodeconfig_statusd_sync_seconds_bucket"},
		`count(up{job=~".*nodeconfig-agent.*"} == 0) or on (x) vector(0)`:                                   {"up"},
		`time() - max by (node) (nodeconfig_node_config_soak_end_seconds) > 9e2`:                            {"nodeconfig_node_config_soak_end_seconds"},
		`sum(rate(a_total[5m] offset 1h)) / ignoring (code) sum(rate(b_total{code="x{y}"}[5m])) and bool c`: {"a_total", "b_total", "c"},
	} {
		if got := metricNames(expr); !slices.Equal(got, want) {
			t.Errorf("metricNames(%s) = %v, want %v", expr, got, want)
		}
	}
}
