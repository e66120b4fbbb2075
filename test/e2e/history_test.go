package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/test/framework/proc"
)

// Each version a NodeConfig rolls out is kept as a revision: undo
// --to-revision 1 after its ConfigMap was edited and then deleted brings
// every node back to revision 1's bytes (each node's file says so), as a
// paced rollout (the nodes' own records: at most maxInTrial trials at
// once). An unknown revision is refused by the plugin and changes nothing.
func TestUndoToRevisionAfterConfigMapDeleted(t *testing.T) {
	e := newEnv(t, 3)
	t.Cleanup(e.deleteHistory)
	rollout := map[string]any{"maxInTrial": int64(1)}
	v1 := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(1), "rollout": rollout})
	e.waitAllPromoted(v1.ResourceVersion)
	e.waitHistory("revision 1 promoted", func(h pluginHistory) bool {
		return len(h.Revisions) == 1 && h.Revisions[0].Outcome == v1alpha1.OutcomePromoted
	})
	v2 := e.configMap("cfg", map[string]string{"config.yaml": "maxPods: 21\n"})
	e.waitAllPromoted(v2.ResourceVersion)
	h := e.waitHistory("revisions 1 and 2 promoted, 2 current", func(h pluginHistory) bool {
		return len(h.Revisions) == 2 && h.Revisions[0].Outcome == v1alpha1.OutcomePromoted &&
			h.Revisions[1].Outcome == v1alpha1.OutcomePromoted && h.Revisions[1].Current
	})
	if r := h.Revisions[0]; r.Revision != 1 || r.Source.ResourceVersion != v1.ResourceVersion || r.Source.Name != "cfg" || r.Source.Key != "config.yaml" {
		t.Fatalf("revision 1 is %+v, want ConfigMap cfg key config.yaml at resourceVersion %s", r, v1.ResourceVersion)
	}
	if err := e.c.Client.CoreV1().ConfigMaps(e.ns).Delete(e.ctx, "cfg", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// An unknown revision: refused, nothing changes.
	before, err := e.nodeConfigNow(e.label)
	if err != nil {
		t.Fatal(err)
	}
	out, stderr, err := e.plugin("undo", e.label, "--to-revision", "7")
	if err == nil || !strings.Contains(stderr, "has no revision 7 (kept: 1, 2)") {
		t.Fatalf("undo --to-revision 7: err %v, stdout %q, stderr %q: want a refusal naming the revisions kept", err, out, stderr)
	}
	if after, err := e.nodeConfigNow(e.label); err != nil || after.Generation != before.Generation || after.Spec.Source.Revision != nil {
		t.Fatalf("the refused undo changed the NodeConfig: generation %d -> %d, spec.source %+v (%v)", before.Generation, after.Generation, after.Spec.Source, err)
	}
	for i, n := range e.nodes {
		if got, _ := n.Target(); got != "maxPods: 21\n" {
			t.Fatalf("node %s's file changed after a refused undo: %q", n.Name, got)
		}
		if rv := e.records(i).GetAssigned().GetSource().GetResourceVersion(); rv != v2.ResourceVersion {
			t.Fatalf("node %s was assigned %s after a refused undo", n.Name, rv)
		}
	}

	// Revision 1, its ConfigMap gone: every node gets its bytes, one at a
	// time.
	if out, stderr, err := e.plugin("undo", e.label, "--to-revision", "1"); err != nil {
		t.Fatalf("undo --to-revision 1: %v\n%s%s", err, out, stderr)
	}
	var recs []*nodeconfigv1.Records
	err = proc.WaitFor(60*time.Second, func() (bool, error) {
		recs = recs[:0]
		done := 0
		for i, n := range e.nodes {
			r := e.records(i)
			recs = append(recs, r)
			file, _ := n.Target()
			if r.GetLastKnownGood().GetSource().GetResourceVersion() == "revision-1" && file == goodYAML {
				done++
			}
		}
		return done == len(e.nodes), fmt.Errorf("%d of %d nodes run revision 1 as last-known-good with its bytes in their file", done, len(e.nodes))
	})
	if err != nil {
		t.Fatal(err)
	}
	if most := mostTrialsAtOnce(recs); most > 1 {
		t.Fatalf("%d trials of revision 1 overlapped (assigned to last-known-good, from the nodes' records); maxInTrial is 1", most)
	}
	for i, r := range recs {
		if a := r.GetAssigned(); a.GetSource().GetResourceVersion() != "revision-1" || a.GetNodeConfig() != e.label {
			t.Fatalf("node %s's assigned record %v: want revision 1 assigned by %s", e.nodes[i].Name, a, e.label)
		}
	}
	e.waitHistory("revision 1 current and promoted again", func(h pluginHistory) bool {
		return len(h.Revisions) == 2 && h.Revisions[0].Current && h.Revisions[0].Pinned && h.Revisions[0].Outcome == v1alpha1.OutcomePromoted
	})
	e.waitNodeConfigCondition(e.label, "Ready", metav1.ConditionTrue, "AllNodesActive", 20*time.Second)
}

// mostTrialsAtOnce is the most trials that overlapped, each running from
// its node's assigned record's write to its last-known-good's.
func mostTrialsAtOnce(recs []*nodeconfigv1.Records) int {
	type trial struct{ from, to time.Time }
	var trials []trial
	for _, r := range recs {
		trials = append(trials, trial{r.GetAssigned().GetWrittenAt().AsTime(), r.GetLastKnownGood().GetWrittenAt().AsTime()})
	}
	most := 0
	for _, at := range trials {
		on := 0
		for _, tr := range trials {
			if !at.from.Before(tr.from) && at.from.Before(tr.to) {
				on++
			}
		}
		most = max(most, on)
	}
	return most
}

func (e *env) waitAllPromoted(want string) {
	e.t.Helper()
	for _, n := range e.nodes {
		e.waitNode(n.Name, 60*time.Second, want+" promoted", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
			return rv(st.LastKnownGood) == want
		})
	}
}

// pluginHistory is `kubectl nodeconfig history -o json`.
type pluginHistory struct {
	Name      string `json:"name"`
	Revisions []struct {
		Revision int64                   `json:"revision"`
		SHA256   string                  `json:"sha256"`
		Source   v1alpha1.RevisionSource `json:"source"`
		Outcome  string                  `json:"outcome"`
		Current  bool                    `json:"current"`
		Pinned   bool                    `json:"pinned"`
	} `json:"revisions"`
}

// waitHistory waits until the plugin's history of the test's NodeConfig
// passes check.
func (e *env) waitHistory(what string, check func(pluginHistory) bool) pluginHistory {
	e.t.Helper()
	var h pluginHistory
	err := proc.WaitFor(30*time.Second, func() (bool, error) {
		out, stderr, err := e.plugin("history", e.label, "-o", "json")
		if err != nil {
			return false, fmt.Errorf("%v: %s", err, stderr)
		}
		h = pluginHistory{}
		if err := json.Unmarshal([]byte(out), &h); err != nil {
			return false, err
		}
		return check(h), fmt.Errorf("history %s", out)
	})
	if err != nil {
		e.t.Fatalf("history never showed %s: %v", what, err)
	}
	if out, _, err := e.plugin("history", e.label); err == nil {
		e.t.Logf("$ kubectl nodeconfig history %s\n%s", e.label, out)
	}
	return h
}

// plugin runs the built kubectl-nodeconfig against the test's cluster.
func (e *env) plugin(args ...string) (stdout, stderr string, err error) {
	e.t.Helper()
	bin, err := proc.Binary("kubectl-nodeconfig")
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(args, "--kubeconfig", e.c.Kubeconfig)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// deleteHistory removes the test NodeConfig's revisions: the suite's API
// server runs no garbage collector to follow their owner reference.
func (e *env) deleteHistory() {
	err := e.c.Client.AppsV1().ControllerRevisions("nodeconfig-system").DeleteCollection(context.Background(), metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: v1alpha1.LabelHistoryOf + "=" + e.label})
	if err != nil {
		e.t.Errorf("delete the revisions of NodeConfig %s: %v", e.label, err)
	}
}
