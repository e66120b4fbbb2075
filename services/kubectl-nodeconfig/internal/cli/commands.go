package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/diff"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/nodeconfigs"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/output"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/report"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/why"
)

// JSON field lists of the --help texts. Names are stable: fields may be
// added, none renamed or removed within v1alpha1.
const (
	jsonCondition = `{type, status, reason, message, since}`
	jsonVersion   = `{namespace, name, uid, resourceVersion, key}, null for the local default`
)

func whyCommand(o *options) *cobra.Command {
	out := output.NewFlags(false)
	return withOutput(&cobra.Command{
		Use:   "why NODE",
		Short: "Explain in sentences why a node is where it is",
		Long: `why explains a node: the NodeConfig selecting it, its NodeConfigReady
condition and versions, the reconciler's view of it (state, error, failures,
backoff, next reconcile, soak end), what holds its NodeConfig's rollout
(paused, outside a maintenance window, halted by maxFailures, a config the
reconciler refuses), and the latest Warning events about the node.

-o json prints:
  node, selectedBy: [NodeConfig names]
  condition:  ` + jsonCondition + ` or null
  reported, assigned, active, lastKnownGood: ` + jsonVersion + `
  error
  reconciler: {reachable, via, error}
  reconcilerNode: {nodeConfig, state, error, failures, backoff, nextReconcile, soakEnds}, absent when unknown
  nodeConfig: {name, paused, ready, progressing, degraded, nextWindow,
               rolledBackVersions: [{uid, resourceVersion, key, validator, nodes}]},
              absent unless exactly one NodeConfig selects the node
  warnings:   [{time, reason, message, count}], newest first, at most 10
  sentences:  [the text output's sentences]
-o name prints node/NODE.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: o.completeNodes,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := o.connect()
			if err != nil {
				return err
			}
			node, err := c.Kube.CoreV1().Nodes().Get(ctx, args[0], metav1.GetOptions{})
			if err != nil {
				return err
			}
			ncs, err := getNodeConfigs(ctx, c, "")
			if err != nil {
				return err
			}
			in := why.Input{Node: node, NodeConfigs: ncs, Now: time.Now()}
			sel := fields.Set{"involvedObject.kind": "Node", "involvedObject.name": node.Name, "type": corev1.EventTypeWarning}.AsSelector().String()
			events, err := c.Kube.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: sel})
			if err != nil {
				warn(o.stderr, "events about node %s not read: %v", node.Name, err)
			} else {
				in.Events = events.Items
			}
			conn, rec := o.reach(ctx, c)
			defer conn.Close()
			if conn != nil {
				callCtx, cancel := o.call(ctx)
				resp, err := conn.GetNode(callCtx, &nodeconfigv1.GetNodeRequest{NodeName: node.Name})
				cancel()
				switch {
				case err == nil:
					in.State = resp.GetNode()
				case unreachable(err):
					rec = report.Reconciler{Via: conn.Via, Error: conn.Via + ": " + grpcText(err)}
				default:
					in.StateError = status.Convert(err).Message()
				}
			}
			in.Reconciler = rec
			e := why.Explain(in)
			return out.Print(o.stdout, output.Result{
				Kind: "NodeExplanation", Value: e, Names: []output.Ref{{GroupKind: nodeKind, Name: node.Name}},
				Text: func(w io.Writer) error { return why.Text(w, e, in.Now) },
			})
		},
	}, out)
}

func diffCommand(o *options) *cobra.Command {
	out := output.NewFlags(false)
	return withOutput(&cobra.Command{
		Use:   "diff NODE",
		Short: "Show the drop-in a node would be given and how its effective config would change",
		Long: `diff asks the reconciler what the node's NodeConfig wants for it (PreviewNode)
and the node what it would run with it, merged with its own files as its
kubelet merges them, before it is given it. It prints the drop-in, then a
unified diff of the node's effective config from now to with the drop-in,
or why the node would refuse it. It needs the reconciler.

-o json prints:
  node, nodeConfig (empty when none selects the node)
  source:    ` + jsonVersion + `
  payload:   the drop-in
  files:     [the node's files its consumer merges, in order]
  merged:    false when the node cannot merge them (current and candidate are the file alone)
  current, candidate: the effective config now and with the drop-in (candidate empty when refused)
  refused:   why the node would refuse the drop-in, empty if not
  diff:      the unified diff from current to candidate, empty when none
-o name prints node/NODE.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: o.completeNodes,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := o.connect()
			if err != nil {
				return err
			}
			conn, rec := o.reach(ctx, c)
			if conn == nil {
				return fmt.Errorf("diff needs the reconciler, which is not reachable: %s", rec.Error)
			}
			defer conn.Close()
			callCtx, cancel := o.call(ctx)
			defer cancel()
			resp, err := conn.PreviewNode(callCtx, &nodeconfigv1.PreviewNodeRequest{NodeName: args[0]})
			if err != nil {
				switch {
				case status.Code(err) == codes.Unimplemented:
					return fmt.Errorf("the reconciler at %s does not implement PreviewNode: it predates diff, upgrade it", conn.Via)
				case unreachable(err):
					return fmt.Errorf("diff needs the reconciler, which is not reachable: %s: %s", conn.Via, grpcText(err))
				default:
					return fmt.Errorf("preview of node %s: %s", args[0], grpcText(err))
				}
			}
			r, err := diff.Build(args[0], resp)
			if err != nil {
				return err
			}
			return out.Print(o.stdout, output.Result{
				Kind: "NodePreview", Value: r, Names: []output.Ref{{GroupKind: nodeKind, Name: args[0]}},
				Text: func(w io.Writer) error { return diff.Text(w, r) },
			})
		},
	}, out)
}

// PauseResult is the output of pause and resume; its JSON is `-o json`.
type PauseResult struct {
	Name            string `json:"name"`
	Paused          bool   `json:"paused"`
	Generation      int64  `json:"generation"`
	ResourceVersion string `json:"resourceVersion"`
}

func pauseCommand(o *options, pause bool) *cobra.Command {
	use, short, long := "pause NODECONFIG", "Pause a NodeConfig's rollout: no new trial starts",
		`pause sets spec.rollout.paused: no new trial starts; nodes soaking finish
their soak and promote; nothing is undone.`
	if !pause {
		use, short, long = "resume NODECONFIG", "Resume a paused NodeConfig's rollout",
			`resume clears spec.rollout.paused: the rollout goes on at its pace.`
	}
	out := output.NewFlags(false)
	return withOutput(&cobra.Command{
		Use:   use,
		Short: short,
		Long: long + `

-o json prints the NodeConfig as stored: {name, paused, generation, resourceVersion}
-o name prints nodeconfig.nodeconfig.io/NODECONFIG.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: o.completeNodeConfigs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := o.connect()
			if err != nil {
				return err
			}
			nc, err := nodeconfigs.Client{NodeConfigs: c.NodeConfigs}.SetPaused(ctx, args[0], pause)
			if err != nil {
				return fmt.Errorf("NodeConfig %s: %w", args[0], err)
			}
			r := PauseResult{Name: nc.Name, Paused: nc.Spec.Rollout.Paused, Generation: nc.Generation, ResourceVersion: nc.ResourceVersion}
			return out.Print(o.stdout, output.Result{
				Kind: "PauseResult", Value: r, Names: []output.Ref{{GroupKind: nodeConfigKind, Name: nc.Name}},
				Text: func(w io.Writer) error { _, err := fmt.Fprintln(w, PauseText(r)); return err },
			})
		},
	}, out)
}

// PauseText is pause's and resume's text output.
func PauseText(r PauseResult) string {
	if r.Paused {
		return fmt.Sprintf("NodeConfig %s paused (spec.rollout.paused=true, generation %d): no new trial starts; nodes soaking finish their soak and promote. Resume with: kubectl nodeconfig resume %s", r.Name, r.Generation, r.Name)
	}
	return fmt.Sprintf("NodeConfig %s resumed (spec.rollout.paused=false, generation %d): the rollout goes on at its pace.", r.Name, r.Generation)
}
