package nodehealth

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// fakePrometheus answers instant queries with result (a JSON vector),
// noting the query it was asked.
func fakePrometheus(t *testing.T, result string) (url string, asked *atomic.Value) {
	asked = &atomic.Value{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/query" {
			http.NotFound(w, r)
			return
		}
		_ = r.ParseForm()
		asked.Store(r.Form.Get("query"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":` + result + `}}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL, asked
}

func TestAPrometheusQueryThatReturnsASeriesFailsTheTrial(t *testing.T) {
	url, asked := fakePrometheus(t, `[{"metric":{"__name__":"oom_kills","node":"n1"},"value":[1700000000,"3"]}]`)
	g, _ := started(t, healthyNode())
	v := g.Judge(nil, restart, &nodeconfigv1.HealthGates{Prometheus: &nodeconfigv1.PrometheusGate{Url: url, Query: `oom_kills{node="$node"} > 0`}})
	if !v.Failed || !strings.Contains(v.Message, `returned 1 series: oom_kills{node="n1"} = 3`) {
		t.Fatalf("verdict %+v; want failed with the series", v)
	}
	if got := asked.Load(); got != `oom_kills{node="n1"} > 0` {
		t.Fatalf("asked %q; want $node replaced by the node's name", got)
	}
}

func TestAnEmptyPrometheusAnswerPassesAndAnUnreachableServerHolds(t *testing.T) {
	url, _ := fakePrometheus(t, `[]`)
	g, _ := started(t, healthyNode())
	if v := g.Judge(nil, restart, &nodeconfigv1.HealthGates{Prometheus: &nodeconfigv1.PrometheusGate{Url: url, Query: "up == 0"}}); v.Failed || v.Hold {
		t.Fatalf("verdict %+v on an empty answer; want a pass", v)
	}
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	v := g.Judge(nil, restart, &nodeconfigv1.HealthGates{Prometheus: &nodeconfigv1.PrometheusGate{Url: closed.URL, Query: "up == 0"}})
	if v.Failed || !v.Hold || !strings.Contains(v.Message, "cannot be run") {
		t.Fatalf("verdict %+v with the server out of reach; want a hold that blames nothing", v)
	}
}

func TestTheNodeConfigsConditionsAndCELJudgeTheNode(t *testing.T) {
	n := healthyNode()
	n.Status.Conditions = append(n.Status.Conditions,
		cond("KernelDeadlock", corev1.ConditionTrue, restart.Add(3e9)),
		cond("FrequentKubeletRestart", corev1.ConditionFalse, restart.Add(-3e9)))
	g, _ := started(t, n)
	v := g.Judge(nil, restart, &nodeconfigv1.HealthGates{Conditions: []*nodeconfigv1.NodeConditionGate{
		{Type: "KernelDeadlock", Status: "False"}, {Type: "FrequentKubeletRestart", Status: "False"}}})
	if !v.Failed || !strings.Contains(v.Message, "KernelDeadlock is True since 2026-11-27T12:00:03Z, not False") || strings.Contains(v.Message, "FrequentKubeletRestart") {
		t.Fatalf("verdict %+v; want failed on KernelDeadlock alone", v)
	}
	if v := g.Judge(nil, restart, &nodeconfigv1.HealthGates{Conditions: []*nodeconfigv1.NodeConditionGate{{Type: "NotReportedYet", Status: "False"}}}); v.Failed || !v.Hold {
		t.Fatalf("verdict %+v on a condition not reported yet; want a hold", v)
	}
	if v := g.Judge(nil, restart, &nodeconfigv1.HealthGates{Cel: `node.metadata.name == "other"`}); !v.Failed || !strings.Contains(v.Message, "spec.health.cel is false") {
		t.Fatalf("verdict %+v; want failed on the CEL gate", v)
	}
	if v := g.Judge(nil, restart, &nodeconfigv1.HealthGates{Cel: `node.status.conditions.exists(c, c.type == "Ready" && c.status == "True")`}); v.Failed || v.Hold {
		t.Fatalf("verdict %+v; want the CEL gate passed", v)
	}
	if v := g.Judge(nil, restart, &nodeconfigv1.HealthGates{Cel: `node.spec.providerID == "x"`}); v.Failed || !v.Hold {
		t.Fatalf("verdict %+v on a field the Node lacks; want a hold", v)
	}
}
