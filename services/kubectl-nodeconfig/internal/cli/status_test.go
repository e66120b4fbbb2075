package cli

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	statusview "nodeconfig.io/services/kubectl-nodeconfig/internal/status"
)

// statusDoc is `status -o json|yaml` as a script reads it.
type statusDoc struct {
	APIVersion  string `json:"apiVersion"`
	Kind        string `json:"kind"`
	NodeConfigs []struct {
		Name   string               `json:"name"`
		Groups []statusview.Group   `json:"groups"`
		Nodes  []statusview.NodeRow `json:"nodes"`
	} `json:"nodeConfigs"`
}

// The status of 1,000 nodes: the groups' counts are the fleet's by
// design, every node is in the group it was made for, and the default
// text stays within a screen: the counts, and five nodes per group.
func TestStatusOfAThousandNodes(t *testing.T) {
	f := newFleet(1000, fleetDesign)
	c := f.clients()
	addr := serveReconciler(t, &fakeReconciler{states: f.states})
	want := f.counts()

	out, stderr, code := runFake(c, "status", "-o", "json", "--reconciler", addr)
	if code != 0 {
		t.Fatalf("status -o json: exit %d: %s", code, stderr)
	}
	var doc statusDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.APIVersion != "plugin.nodeconfig.io/v1alpha1" || doc.Kind != "Status" || len(doc.NodeConfigs) != 1 {
		t.Fatalf("status -o json: %s %s, %d NodeConfigs", doc.APIVersion, doc.Kind, len(doc.NodeConfigs))
	}
	got := map[string]int{}
	for _, g := range doc.NodeConfigs[0].Groups {
		got[g.Outcome] = g.Nodes
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("groups %v, want %v (by design)", got, want)
	}
	if n := len(doc.NodeConfigs[0].Nodes); n != 1000 {
		t.Fatalf("-o json lists %d nodes, want every one of 1000", n)
	}
	for _, n := range doc.NodeConfigs[0].Nodes {
		if n.Outcome != f.truth[n.Name] {
			t.Errorf("%s (%s, %s) is in group %s, want %s", n.Name, n.Phase, n.ReconcilerState, n.Outcome, f.truth[n.Name])
		}
	}

	text, _, code := runFake(c, "status", "--reconciler", addr)
	if code != 0 {
		t.Fatalf("status: exit %d", code)
	}
	t.Logf("$ kubectl nodeconfig status\n%s", text)
	if !strings.Contains(text, "  nodes: Refused 20, Failed 30, Trial 100, Waiting 250, Active 590, Unreported 10\n") {
		t.Errorf("status does not count the groups by design:\n%s", text)
	}
	for g, n := range want {
		title := fmt.Sprintf("  %s (%d): %s; the first %d, --phase %s or --all for every one\n", g, n, statusview.OutcomeMeaning(g), DefaultPerGroup, g)
		if !strings.Contains(text, title) {
			t.Errorf("no title %q", title)
		}
	}
	rows := lines(text, "    node-")
	if len(rows) != 6*DefaultPerGroup {
		t.Errorf("%d node rows, want %d per group of 6", len(rows), DefaultPerGroup)
	}
	// A screen: the header lines, the counts, a title per group, the
	// column header and five nodes per group.
	if n := strings.Count(text, "\n"); n > 50 {
		t.Errorf("status of 1,000 nodes is %d lines, want at most 50", n)
	}

	all, _, _ := runFake(c, "status", "--all", "--reconciler", addr)
	if n := len(lines(all, "    node-")); n != 1000 {
		t.Errorf("status --all lists %d nodes, want 1000", n)
	}
	refused, _, _ := runFake(c, "status", "--phase", "refused", "--reconciler", addr)
	rows = lines(refused, "    node-")
	if len(rows) != want["Refused"] {
		t.Errorf("status --phase refused lists %d nodes, want %d", len(rows), want["Refused"])
	}
	for _, r := range rows {
		if name := strings.Fields(r)[0]; f.truth[name] != "Refused" {
			t.Errorf("--phase refused lists %s, which is %s", name, f.truth[name])
		}
	}
	// The phase itself filters as well as its group.
	names, _, _ := runFake(c, "status", "--phase", "DownloadFailed", "-o", "name", "--reconciler", addr)
	if n := strings.Count(names, "node/node-"); n != want["Failed"] || strings.Count(names, "\n") != n {
		t.Errorf("status --phase DownloadFailed -o name:\n%s", names)
	}
}

// -o yaml holds what -o json does; -o jsonpath, -o wide and -o name print
// through cli-runtime's printers.
func TestStatusPrinters(t *testing.T) {
	f := newFleet(12, fleetDesign)
	c := f.clients()
	addr := serveReconciler(t, &fakeReconciler{states: f.states})
	js, _, _ := runFake(c, "status", "-o", "json", "--reconciler", addr)
	ym, stderr, code := runFake(c, "status", "-o", "yaml", "--reconciler", addr)
	if code != 0 {
		t.Fatalf("-o yaml: exit %d: %s", code, stderr)
	}
	var fromJSON, fromYAML map[string]any
	if err := json.Unmarshal([]byte(js), &fromJSON); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(ym), &fromYAML); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromJSON, fromYAML) {
		t.Errorf("-o yaml and -o json differ:\n%s\n%s", ym, js)
	}

	out, _, _ := runFake(c, "status", "-o", "jsonpath={.nodeConfigs[0].groups[0].outcome}={.nodeConfigs[0].groups[0].nodes}", "--reconciler", addr)
	if out != "Refused=2" {
		t.Errorf("-o jsonpath: %q", out)
	}
	wide, _, _ := runFake(c, "status", "-o", "wide", "--reconciler", addr)
	ls := strings.Split(strings.TrimSuffix(wide, "\n"), "\n")
	if len(ls) != 13 || !reflect.DeepEqual(strings.Fields(ls[0])[:3], []string{"NODECONFIG", "NODE", "OUTCOME"}) || !strings.HasSuffix(ls[0], "MESSAGE") {
		t.Fatalf("-o wide:\n%s", wide)
	}
	if got := strings.Fields(ls[1]); got[0] != "fleet" || got[1] != "node-0000" || got[2] != "Refused" || got[3] != "RolledBack" {
		t.Errorf("-o wide row: %q", got)
	}
	names, _, _ := runFake(c, "status", "-o", "name", "--reconciler", addr)
	if strings.Count(names, "\n") != 12 || !strings.HasPrefix(names, "node/node-0000\nnode/node-0001\n") {
		t.Errorf("-o name:\n%s", names)
	}
}

// BenchmarkStatusOfAThousandNodes times `status` of 1,000 nodes from
// fake API clients and a reconciler on 127.0.0.1: the plugin's own work
// (list, join, group, print), not the API server's.
func BenchmarkStatusOfAThousandNodes(b *testing.B) {
	f := newFleet(1000, fleetDesign)
	c := f.clients()
	addr := serveReconciler(b, &fakeReconciler{states: f.states})
	for b.Loop() {
		if _, stderr, code := runFake(c, "status", "--reconciler", addr); code != 0 {
			b.Fatalf("exit %d: %s", code, stderr)
		}
	}
}
