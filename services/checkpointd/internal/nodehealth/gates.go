package nodehealth

import (
	"context"
	"fmt"
	"strings"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/configcheck/healthcel"
)

// queryTimeout bounds one Prometheus query: a server that does not answer
// in it is out of reach, and the soak holds.
const queryTimeout = 10 * time.Second

// judgeGates judges the NodeConfig's own gates: its Node conditions, its
// CEL expression, its Prometheus query.
func (g *Gate) judgeGates(node *corev1.Node, restarted time.Time, gates *nodeconfigv1.HealthGates) (failed, held []string) {
	for _, want := range gates.GetConditions() {
		c := condition(node, corev1.NodeConditionType(want.GetType()))
		switch {
		case c == nil:
			held = append(held, fmt.Sprintf("the Node has no %s condition yet (spec.health.conditions)", want.GetType()))
		case string(c.Status) == want.GetStatus():
		case c.LastTransitionTime.Time.Before(restarted):
			held = append(held, fmt.Sprintf("the Node's %s is %s, not %s, from before the kubelet's restart: not the config's doing", c.Type, c.Status, want.GetStatus()))
		default:
			failed = append(failed, fmt.Sprintf("the Node's %s is %s since %s, not %s (%s: %s)", c.Type, c.Status, c.LastTransitionTime.UTC().Format(time.RFC3339), want.GetStatus(), c.Reason, c.Message))
		}
	}
	if expr := gates.GetCel(); expr != "" {
		switch ok, err := g.celHolds(expr, node); {
		case err != nil:
			held = append(held, fmt.Sprintf("spec.health.cel cannot be evaluated over the Node: %v", err))
		case !ok:
			failed = append(failed, fmt.Sprintf("spec.health.cel is false over the Node: %s", expr))
		}
	}
	if p := gates.GetPrometheus(); p != nil {
		f, h := g.prometheus(p)
		failed, held = append(failed, f...), append(held, h...)
	}
	return failed, held
}

// celHolds evaluates expr, compiled once per expression.
func (g *Gate) celHolds(expr string, node *corev1.Node) (bool, error) {
	g.mu.Lock()
	prg := g.cel
	g.mu.Unlock()
	if prg == nil || prg.String() != expr {
		var err error
		if prg, err = healthcel.Compile(expr); err != nil {
			return false, err
		}
		g.mu.Lock()
		g.cel = prg
		g.mu.Unlock()
	}
	return prg.Holds(node)
}

// prometheusAPI is the client of the server at url, made once per URL:
// the gate asks it at every look, and a client keeps its connections.
func (g *Gate) prometheusAPI(url string) (promv1.API, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.prom != nil && g.promURL == url {
		return g.prom, nil
	}
	client, err := promapi.NewClient(promapi.Config{Address: url})
	if err != nil {
		return nil, err
	}
	g.prom, g.promURL = promv1.NewAPI(client), url
	return g.prom, nil
}

// prometheus runs the gate's query, $node being this node's name: a series
// fails it, a server out of reach or an error holds.
func (g *Gate) prometheus(p *nodeconfigv1.PrometheusGate) (failed, held []string) {
	query := strings.ReplaceAll(p.GetQuery(), "$node", g.o.Node)
	api, err := g.prometheusAPI(p.GetUrl())
	if err != nil {
		return nil, []string{fmt.Sprintf("spec.health.prometheus.url %q: %v", p.GetUrl(), err)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	value, _, _, err := api.Query(ctx, query, g.o.Now())
	if err != nil {
		return nil, []string{fmt.Sprintf("the Prometheus query %s cannot be run at %s: %v", query, p.GetUrl(), err)}
	}
	var series []string
	switch v := value.(type) {
	case model.Vector:
		for _, s := range v {
			series = append(series, fmt.Sprintf("%s = %s", s.Metric, s.Value))
		}
	case model.Matrix:
		for _, s := range v {
			series = append(series, s.Metric.String())
		}
	case *model.Scalar:
		series = append(series, "scalar "+v.Value.String())
	case *model.String:
		series = append(series, "string "+v.Value)
	}
	if len(series) == 0 {
		return nil, nil
	}
	return []string{fmt.Sprintf("the Prometheus query %s at %s returned %d series: %s", query, p.GetUrl(), len(series), names(series))}, nil
}
