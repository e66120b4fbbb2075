// Package diff prints `kubectl nodeconfig diff NODE` from the reconciler's
// PreviewNode: the drop-in the node would be given, and a unified diff of
// the node's effective config from now to with the drop-in.
package diff

import (
	"fmt"
	"io"
	"strings"

	"github.com/pmezard/go-difflib/difflib"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/report"
)

// Result is the output; its JSON is `diff -o json`.
type Result struct {
	Node string `json:"node"`
	// NodeConfig selects the node; empty when none does.
	NodeConfig string `json:"nodeConfig"`
	// Source is the desired config, pinned; null for the local default.
	Source *report.Version `json:"source"`
	// Payload is the drop-in the node would be given.
	Payload string `json:"payload"`
	// Files are the node's files its consumer merges, in order.
	Files []string `json:"files"`
	// Merged is false when the node cannot merge its consumer's files:
	// current and candidate are then the file alone.
	Merged bool `json:"merged"`
	// Current is the effective config now; Candidate with the drop-in,
	// empty when the node would refuse it.
	Current   string `json:"current"`
	Candidate string `json:"candidate"`
	// Refused says why the node would refuse the drop-in; empty if not.
	Refused string `json:"refused"`
	// Diff is the unified diff from current to candidate; empty when they
	// are the same or the drop-in is refused.
	Diff string `json:"diff"`
}

// Build turns the reconciler's answer into the result.
func Build(node string, resp *nodeconfigv1.PreviewNodeResponse) (Result, error) {
	p := resp.GetPreview()
	r := Result{
		Node: node, NodeConfig: resp.GetNodeConfig(), Payload: string(resp.GetPayload()),
		Files: append([]string{}, p.GetFiles()...), Merged: p.GetMerged(),
		Current: p.GetCurrent(), Candidate: p.GetCandidate(), Refused: p.GetRefused(),
	}
	if s := resp.GetSource(); s != nil {
		r.Source = &report.Version{Namespace: s.GetNamespace(), Name: s.GetName(), UID: s.GetUid(), ResourceVersion: s.GetResourceVersion(), Key: s.GetKey()}
	}
	if r.Refused != "" || r.Current == r.Candidate {
		return r, nil
	}
	files := strings.Join(r.Files, " + ")
	if files == "" {
		files = "the node's file"
	}
	d, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: lines(r.Current), B: lines(r.Candidate),
		FromFile: node + " now: " + files, ToFile: node + " with the drop-in: " + files, Context: 3,
	})
	if err != nil {
		return r, err
	}
	r.Diff = d
	return r, nil
}

// lines splits s into lines that keep their newline (difflib.SplitLines
// would add an empty last line to a text that ends with one).
func lines(s string) []string {
	if s == "" {
		return nil
	}
	parts := strings.SplitAfter(withNewline(s), "\n")
	return parts[:len(parts)-1] // the empty string after the last newline
}

func withNewline(s string) string {
	if s != "" && !strings.HasSuffix(s, "\n") {
		return s + "\n"
	}
	return s
}

// Text prints the result for a person.
func Text(w io.Writer, r Result) error {
	var b strings.Builder
	switch {
	case r.NodeConfig == "":
		fmt.Fprintf(&b, "No NodeConfig selects %s: it would return to its local default.\n", r.Node)
	case r.Source == nil:
		fmt.Fprintf(&b, "NodeConfig %s wants the local default for %s: no drop-in.\n", r.NodeConfig, r.Node)
	default:
		fmt.Fprintf(&b, "NodeConfig %s wants %s for %s.\n", r.NodeConfig, r.Source.Sentence(), r.Node)
	}
	if r.Payload != "" {
		fmt.Fprintf(&b, "\nThe drop-in:\n%s", indent(r.Payload))
	}
	if len(r.Files) > 0 || !r.Merged {
		b.WriteString("\n")
	}
	if len(r.Files) > 0 {
		fmt.Fprintf(&b, "The node merges, in order: %s.\n", strings.Join(r.Files, ", "))
	}
	if !r.Merged {
		b.WriteString("Note: the node knows no way to merge its consumer's files (not a kubelet, or no --kubelet-config): what follows is the file alone.\n")
	}
	switch {
	case r.Refused != "":
		fmt.Fprintf(&b, "\nThe node would refuse it: %s\n", r.Refused)
	case r.Diff == "":
		fmt.Fprintf(&b, "\nNo change: %s already runs this effective config (-o json shows it).\n", r.Node)
	default:
		fmt.Fprintf(&b, "\nIts effective config would change:\n%s", withNewline(r.Diff))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func indent(s string) string {
	s = withNewline(s)
	if s == "" {
		return ""
	}
	lines := strings.SplitAfter(s, "\n")
	var b strings.Builder
	for _, l := range lines {
		if l != "" {
			b.WriteString("  " + l)
		}
	}
	return b.String()
}
