// Package status builds and prints `kubectl nodeconfig status`: per
// NodeConfig its conditions, pause and counts, its nodes grouped by outcome
// (Refused, Failed, Trial, ...) with a count each, and the first nodes of
// each group: a line per node with its phase, versions, error and soak end.
package status

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/nodeconfigs"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/nodestatus"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/report"
)

// Input is what status reads.
type Input struct {
	NodeConfigs []v1alpha1.NodeConfig
	Nodes       []corev1.Node
	Reconciler  report.Reconciler
	// States are the reconciler's ListNodes by node name; nil when it was
	// not reachable.
	States map[string]*nodeconfigv1.NodeState
	// Phases keep the nodes listed to those of these outcomes or phases
	// (--phase); empty lists every node. Groups count every node.
	Phases []string
}

// Report is the output; its JSON is `status -o json`.
type Report struct {
	Reconciler  report.Reconciler `json:"reconciler"`
	NodeConfigs []NodeConfig      `json:"nodeConfigs"`
}

// NodeConfig is one NodeConfig and the nodes it selects.
type NodeConfig struct {
	Name string `json:"name"`
	// Source is null for the nodes' local default.
	Source      *v1alpha1.ConfigMapSource `json:"source"`
	Paused      bool                      `json:"paused"`
	Ready       *report.Condition         `json:"ready"`
	Progressing *report.Condition         `json:"progressing"`
	Degraded    *report.Condition         `json:"degraded"`
	NextWindow  *time.Time                `json:"nextWindow,omitempty"`
	// Waves is the status's waves, with spec.rollout.topologyKey.
	Waves  *v1alpha1.RolloutWaves `json:"waves,omitempty"`
	Counts Counts                 `json:"counts"`
	// Groups count the selected nodes by outcome, in Outcomes' order,
	// the empty ones left out.
	Groups []Group `json:"groups"`
	// Nodes are the nodes listed: every selected node, or those --phase
	// keeps.
	Nodes []NodeRow `json:"nodes"`
}

// Group is how many selected nodes have one outcome.
type Group struct {
	Outcome string `json:"outcome"`
	Nodes   int    `json:"nodes"`
}

// Counts are the NodeConfig's status counts.
type Counts struct {
	Selected   int32 `json:"selected"`
	Active     int32 `json:"active"`
	Soaking    int32 `json:"soaking"`
	Waiting    int32 `json:"waiting"`
	RolledBack int32 `json:"rolledBack"`
	Failing    int32 `json:"failing"`
}

// NodeRow is one selected node.
type NodeRow struct {
	Name string `json:"name"`
	// Outcome is the node's group (Outcomes).
	Outcome string `json:"outcome"`
	// Phase and Ready are the NodeConfigReady condition's reason and
	// status; empty until statusd reports.
	Phase   string `json:"phase"`
	Ready   string `json:"ready"`
	Message string `json:"message"`
	// Versions from the config-status annotation; null is the local default.
	Assigned      *report.Version `json:"assigned"`
	Active        *report.Version `json:"active"`
	LastKnownGood *report.Version `json:"lastKnownGood"`
	// Reported is false while the node has no readable annotation.
	Reported bool   `json:"reported"`
	Error    string `json:"error"`
	// ReconcilerState is the reconciler's lifecycle state ("SOAKING",
	// "WAITING", ...); empty when it was not reachable or does not know
	// the node.
	ReconcilerState string `json:"reconcilerState,omitempty"`
	// SoakEnds is when the node's trial ends, while it soaks.
	SoakEnds *time.Time `json:"soakEnds,omitempty"`
}

// Build joins the NodeConfigs, the nodes they select and the reconciler's
// view. A node selected by two NodeConfigs shows under both.
func Build(in Input) Report {
	r := Report{Reconciler: in.Reconciler, NodeConfigs: []NodeConfig{}}
	nodes := append([]corev1.Node(nil), in.Nodes...)
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	for i := range in.NodeConfigs {
		nc := &in.NodeConfigs[i]
		out := NodeConfig{
			Name:        nc.Name,
			Source:      nodeconfigs.ConfigMapOf(nc),
			Paused:      nc.Spec.Rollout.Paused,
			Ready:       report.FromMeta(nodeconfigs.Condition(nc, v1alpha1.ConditionReady)),
			Progressing: report.FromMeta(nodeconfigs.Condition(nc, v1alpha1.ConditionProgressing)),
			Degraded:    report.FromMeta(nodeconfigs.Condition(nc, v1alpha1.ConditionDegraded)),
			Counts: Counts{Selected: nc.Status.Selected, Active: nc.Status.Active, Soaking: nc.Status.Soaking,
				Waiting: nc.Status.Waiting, RolledBack: nc.Status.RolledBack, Failing: nc.Status.Failing},
			Groups: []Group{},
			Nodes:  []NodeRow{},
		}
		if nc.Status.NextWindow != nil {
			t := nc.Status.NextWindow.Time
			out.NextWindow = &t
		}
		out.Waves = nc.Status.Waves
		sel := nodeconfigs.Selector(nc)
		counts := map[string]int{}
		for j := range nodes {
			if !sel.Matches(labels.Set(nodes[j].Labels)) {
				continue
			}
			row := node(&nodes[j], in.States, out.Source != nil)
			counts[row.Outcome]++
			if row.Matches(in.Phases) {
				out.Nodes = append(out.Nodes, row)
			}
		}
		for _, o := range Outcomes {
			if counts[o] > 0 {
				out.Groups = append(out.Groups, Group{Outcome: o, Nodes: counts[o]})
			}
		}
		r.NodeConfigs = append(r.NodeConfigs, out)
	}
	return r
}

func node(n *corev1.Node, states map[string]*nodeconfigv1.NodeState, hasSource bool) NodeRow {
	ns := nodestatus.Read(n)
	out := NodeRow{Name: n.Name, Assigned: ns.Assigned, Active: ns.Active, LastKnownGood: ns.LastKnownGood, Reported: ns.Reported, Error: ns.Error}
	if ns.Unreadable != "" {
		out.Error = ns.Unreadable
	}
	if c := ns.Condition; c != nil {
		out.Phase, out.Ready, out.Message = c.Reason, c.Status, c.Message
	}
	if st := states[n.Name]; st != nil {
		out.ReconcilerState = report.State(st.GetState())
		if st.GetSoakEndsTime() != nil {
			t := st.GetSoakEndsTime().AsTime()
			out.SoakEnds = &t
		}
	}
	out.Outcome = outcomeOf(out.Phase, out.Ready, out.ReconcilerState, hasSource)
	return out
}

// Names are the nodes listed, each once, by name.
func (r Report) Names() []string {
	var out []string
	for _, nc := range r.NodeConfigs {
		for _, n := range nc.Nodes {
			out = append(out, n.Name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TextOptions say how much Text prints.
type TextOptions struct {
	Now time.Time
	// PerGroup is how many nodes of each group are listed; 0 lists every
	// one.
	PerGroup int
}

// Text prints the report for a person: per NodeConfig its conditions and
// counts, the count of each group, and the first nodes of each group, in
// one table per NodeConfig whose columns line up across its groups.
func Text(w io.Writer, r Report, o TextOptions) error {
	ew := &errWriter{w: w}
	if r.Reconciler.Reachable {
		ew.printf("reconciler: %s\n", r.Reconciler.Via)
	} else {
		ew.printf("reconciler: not reachable (%s); lifecycle states and soak ends are not shown\n", r.Reconciler.Error)
	}
	if len(r.NodeConfigs) == 0 {
		ew.printf("\nno NodeConfigs\n")
	}
	for _, nc := range r.NodeConfigs {
		ew.printf("\nNodeConfig %s (%s)\n", nc.Name, sourceText(nc.Source))
		ew.printf("  Ready=%s  Progressing=%s  Degraded=%s  paused=%t  selected=%d active=%d soaking=%d waiting=%d rolledBack=%d failing=%d\n",
			nc.Ready.Short(), nc.Progressing.Short(), nc.Degraded.Short(), nc.Paused,
			nc.Counts.Selected, nc.Counts.Active, nc.Counts.Soaking, nc.Counts.Waiting, nc.Counts.RolledBack, nc.Counts.Failing)
		if nc.Degraded != nil && nc.Degraded.Status == "True" {
			ew.printf("  Degraded: %s\n", nc.Degraded.Message)
		}
		if nc.Progressing != nil && (nc.Progressing.Reason == v1alpha1.ReasonPaused || nc.Progressing.Reason == v1alpha1.ReasonOutsideWindow) {
			ew.printf("  Progressing: %s\n", nc.Progressing.Message)
		}
		if nc.NextWindow != nil {
			ew.printf("  next maintenance window: %s\n", report.When(*nc.NextWindow, o.Now))
		}
		if nc.Waves != nil {
			ew.printf("  %s\n", wavesText(nc.Waves))
		}
		if len(nc.Groups) == 0 {
			ew.printf("  (selects no node)\n")
			continue
		}
		var counts []string
		for _, g := range nc.Groups {
			counts = append(counts, fmt.Sprintf("%s %d", g.Outcome, g.Nodes))
		}
		ew.printf("  nodes: %s\n", strings.Join(counts, ", "))
		if err := nodeTable(ew, r, nc, o); err != nil {
			return err
		}
	}
	return ew.err
}

// nodeTable prints the listed nodes group by group under one header: the
// rows go through one tabwriter, and each group's title line is put in
// front of its first row afterwards, so that it breaks no column.
func nodeTable(w io.Writer, r Report, nc NodeConfig, o TextOptions) error {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "    NODE\tPHASE\tREADY\tRECONCILER\tASSIGNED\tACTIVE\tLAST-KNOWN-GOOD\tSOAK ENDS\tERROR")
	titles := map[int]string{} // line of the table -> the title before it
	line := 1
	for _, g := range nc.Groups {
		listed := 0
		for _, n := range nc.Nodes {
			if n.Outcome != g.Outcome || (o.PerGroup > 0 && listed == o.PerGroup) {
				continue
			}
			if listed == 0 {
				titles[line] = groupTitle(g, nc, o.PerGroup)
			}
			fmt.Fprintln(tw, "    "+n.Name+"\t"+strings.Join(nodeCells(n, nc.Source, r.Reconciler.Reachable, o.Now), "\t"))
			listed++
			line++
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if line == 1 {
		_, err := fmt.Fprintln(w, "  (none of its nodes has the --phase asked for)")
		return err
	}
	for i, l := range strings.SplitAfter(buf.String(), "\n") {
		if t, ok := titles[i]; ok {
			if _, err := io.WriteString(w, t); err != nil {
				return err
			}
		}
		if _, err := io.WriteString(w, l); err != nil {
			return err
		}
	}
	return nil
}

// groupTitle is the line above a group's nodes: its outcome, count and
// meaning, and how to list the rest.
func groupTitle(g Group, nc NodeConfig, perGroup int) string {
	listed := 0
	for _, n := range nc.Nodes {
		if n.Outcome == g.Outcome {
			listed++
		}
	}
	t := fmt.Sprintf("  %s (%d): %s", g.Outcome, g.Nodes, OutcomeMeaning(g.Outcome))
	if perGroup > 0 && listed > perGroup {
		t += fmt.Sprintf("; the first %d, --phase %s or --all for every one", perGroup, g.Outcome)
	}
	return t + "\n"
}

// Table is every listed node of every NodeConfig in one table, for -o wide.
func Table(r Report, now time.Time) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "NodeConfig", Type: "string"}, {Name: "Node", Type: "string", Format: "name"}, {Name: "Outcome", Type: "string"},
		{Name: "Phase", Type: "string"}, {Name: "Ready", Type: "string"}, {Name: "Reconciler", Type: "string"},
		{Name: "Assigned", Type: "string"}, {Name: "Active", Type: "string"}, {Name: "Last-Known-Good", Type: "string"},
		{Name: "Soak Ends", Type: "string"}, {Name: "Error", Type: "string"}, {Name: "Message", Type: "string", Priority: 1},
	}}
	for _, nc := range r.NodeConfigs {
		for _, n := range nc.Nodes {
			cells := []any{nc.Name, n.Name, n.Outcome}
			for _, c := range nodeCells(n, nc.Source, r.Reconciler.Reachable, now) {
				cells = append(cells, c)
			}
			t.Rows = append(t.Rows, metav1.TableRow{Cells: append(cells, orDash(oneLine(n.Message)))})
		}
	}
	return t
}

// nodeCells are a node's cells from PHASE to ERROR, alike in the text's
// table and in -o wide's.
func nodeCells(n NodeRow, src *v1alpha1.ConfigMapSource, reachable bool, now time.Time) []string {
	ns, name := "", ""
	if src != nil {
		ns, name = src.Namespace, src.Name
	}
	return []string{orDash(n.Phase), orDash(n.Ready), reconcilerCell(n, reachable),
		versionCell(n.Assigned, n.Reported, ns, name), versionCell(n.Active, n.Reported, ns, name), versionCell(n.LastKnownGood, n.Reported, ns, name),
		soakCell(n, reachable, now), orDash(oneLine(n.Error))}
}

// wavesText is the waves' order and the one under way, on one line.
func wavesText(w *v1alpha1.RolloutWaves) string {
	names := make([]string, 0, len(w.Order)+1)
	for _, v := range w.Order {
		names = append(names, waveName(v))
	}
	if int(w.Count) > len(w.Order) {
		names = append(names, fmt.Sprintf("... (%d in all)", w.Count))
	}
	now := "every wave done"
	if i := int(w.Current); i > 0 {
		now = fmt.Sprintf("under way: %d of %d", i, w.Count)
		if i <= len(w.Order) {
			now += " (" + waveName(w.Order[i-1]) + ")"
		}
	}
	return fmt.Sprintf("waves by %s: %s; %s", w.TopologyKey, strings.Join(names, ", "), now)
}

// waveName is a wave's value; "" is the nodes without the label.
func waveName(v string) string {
	if v == "" {
		return "(no label)"
	}
	return v
}

func sourceText(s *v1alpha1.ConfigMapSource) string {
	if s == nil {
		return "the nodes' local default"
	}
	return fmt.Sprintf("ConfigMap %s/%s key %s", s.Namespace, s.Name, s.Key)
}

func versionCell(v *report.Version, reported bool, ns, name string) string {
	if !reported {
		return "?"
	}
	return v.Text(ns, name)
}

func reconcilerCell(n NodeRow, reachable bool) string {
	switch {
	case !reachable:
		return "?"
	case n.ReconcilerState == "":
		return "unknown"
	}
	return strings.ToLower(n.ReconcilerState)
}

func soakCell(n NodeRow, reachable bool, now time.Time) string {
	switch {
	case !reachable:
		return "?"
	case n.SoakEnds == nil:
		return "-"
	}
	return report.When(*n.SoakEnds, now)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps a table row one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

func (e *errWriter) printf(format string, args ...any) { fmt.Fprintf(e, format, args...) }
