package validate

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/diff"
)

// NodeCheck is a node's verdict on a payload: merged with the node's own
// files as its kubelet merges them, and judged as on activation, by the
// node's agent itself (the reconciler's PreviewNode with a candidate). It
// is what the node would run, which the central check cannot see.
type NodeCheck struct {
	Node string `json:"node"`
	// Selected says whether the NodeConfig checked selects the node
	// (NodeConfigs only).
	Selected *bool    `json:"selected,omitempty"`
	Verdict  string   `json:"verdict"`
	Reason   string   `json:"reason,omitempty"`
	Files    []string `json:"files,omitempty"`
	// Merged is false when the node cannot merge its files (not a kubelet,
	// or no --kubelet-config): Current and Candidate are the file alone.
	Merged bool `json:"merged"`
	// Current is the node's effective config now; Candidate with the
	// payload, empty when refused; Diff from one to the other.
	Current   string `json:"current,omitempty"`
	Candidate string `json:"candidate,omitempty"`
	Diff      string `json:"diff,omitempty"`
}

// Previewer asks the node what it would run with payload in the place of
// its drop-in (nil payload: the drop-in removed), judged by v. A
// *NoAnswerError leaves that payload without the node's verdict; any other
// error ends the checks.
type Previewer func(ctx context.Context, payload []byte, v nodeconfigv1.Validator) (*nodeconfigv1.PreviewNodeResponse, error)

// NoAnswerError is a node that could not judge a payload (its agent is
// unreachable, or has not found its kubelet's files yet).
type NoAnswerError struct{ Err error }

func (e *NoAnswerError) Error() string { return e.Err.Error() }
func (e *NoAnswerError) Unwrap() error { return e.Err }

// OnNode asks node about every payload the central check did not refuse,
// and counts each check's worst verdict. nodeLabels say which NodeConfigs
// select the node.
func OnNode(ctx context.Context, r *Report, node string, nodeLabels map[string]string, ask Previewer) error {
	r.Node = node
	r.Passed, r.Refused, r.Unjudged = 0, 0, 0
	for i := range r.Checks {
		c := &r.Checks[i]
		if c.judged && c.Verdict != Refused {
			n, err := judgeOnNode(ctx, node, c, ask)
			if err != nil {
				return err
			}
			if c.selector != nil {
				selected := c.selector.Matches(labels.Set(nodeLabels))
				n.Selected = &selected
			}
			c.Node = n
		}
		r.count(*c)
	}
	return nil
}

func judgeOnNode(ctx context.Context, node string, c *Check, ask Previewer) (*NodeCheck, error) {
	n := &NodeCheck{Node: node}
	resp, err := ask(ctx, c.payload, c.validator)
	var noAnswer *NoAnswerError
	if errors.As(err, &noAnswer) {
		n.Verdict, n.Reason = Unjudged, noAnswer.Error()
		return n, nil
	}
	if err != nil {
		return nil, err
	}
	d, err := diff.Build(node, resp)
	if err != nil {
		return nil, err
	}
	n.Files, n.Merged, n.Current, n.Candidate, n.Diff = d.Files, d.Merged, d.Current, d.Candidate, d.Diff
	n.Verdict, n.Reason = Passed, d.Refused
	if d.Refused != "" {
		n.Verdict = Refused
	}
	return n, nil
}

// worst is the verdict of two that counts: refused, then no verdict.
func worst(a, b string) string {
	for _, v := range []string{Refused, Unjudged} {
		if a == v || b == v {
			return v
		}
	}
	return Passed
}

// text is the node's verdict under its check's line, indented.
func (n *NodeCheck) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  on node %s: %s", n.Node, strings.ToLower(n.Verdict))
	switch {
	case n.Reason != "":
		fmt.Fprintf(&b, ": %s", n.Reason)
	case n.Diff != "":
		b.WriteString(": its effective config would change:\n")
		for _, l := range strings.SplitAfter(strings.TrimSuffix(n.Diff, "\n"), "\n") {
			b.WriteString("    " + l)
		}
	case n.Verdict == Passed:
		b.WriteString(": no change to its effective config")
	}
	if n.Verdict == Passed {
		if len(n.Files) > 0 {
			fmt.Fprintf(&b, "\n  the node merges, in order: %s", strings.Join(n.Files, ", "))
		}
		if !n.Merged {
			b.WriteString("\n  note: the node knows no way to merge its files (not a kubelet, or no --kubelet-config): it judged the file alone")
		}
	}
	if n.Selected != nil && !*n.Selected {
		fmt.Fprintf(&b, "\n  note: this NodeConfig does not select node %s", n.Node)
	}
	return b.String()
}
