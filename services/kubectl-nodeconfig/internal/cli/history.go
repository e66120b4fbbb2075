package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"nodeconfig.io/services/kubectl-nodeconfig/internal/history"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/nodeconfigs"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/output"
)

func historyCommand(o *options) *cobra.Command {
	out := output.NewFlags(false)
	return withOutput(&cobra.Command{
		Use:   "history NODECONFIG",
		Short: "List the revisions a NodeConfig rolled out, as kubectl rollout history",
		Long: `history lists the revisions of a NodeConfig: each version of its ConfigMap key
it rolled out, kept by the reconciler as a ControllerRevision in --namespace
(the newest --revision-history-limit of them). Per revision: its number, the
payload's sha256 (short), the ConfigMap version it was read from, when its
latest rollout started, and how that went (RollingOut, Promoted, Halted,
Refused, Superseded); the current one (its rollout started last) and the one
spec.source.revision pins are marked.

-o json prints:
  name, revisions: [{revision, sha256, source: {namespace, name, uid, resourceVersion, key},
    started (RFC 3339), outcome, current, pinned, error}]
-o name prints nodeconfig.nodeconfig.io/NODECONFIG.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: o.completeNodeConfigs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := o.connect()
			if err != nil {
				return err
			}
			nc, err := nodeconfigs.Client{NodeConfigs: c.NodeConfigs}.Get(ctx, args[0])
			if err != nil {
				return fmt.Errorf("NodeConfig %s: %w", args[0], err)
			}
			revs, err := history.List(ctx, c.Kube, o.namespace(), nc)
			if err != nil {
				return err
			}
			return out.Print(o.stdout, output.Result{
				Kind: "History", Value: HistoryResult{Name: nc.Name, Revisions: revs}, Names: []output.Ref{{GroupKind: nodeConfigKind, Name: nc.Name}},
				Text: func(w io.Writer) error { return history.Text(w, nc.Name, revs) },
			})
		},
	}, out)
}

// HistoryResult is history's `-o json`.
type HistoryResult struct {
	Name      string             `json:"name"`
	Revisions []history.Revision `json:"revisions"`
}

// UndoResult is undo's `-o json`.
type UndoResult struct {
	Name            string `json:"name"`
	Revision        int64  `json:"revision"`
	Changed         bool   `json:"changed"`
	Generation      int64  `json:"generation"`
	ResourceVersion string `json:"resourceVersion"`
}

func undoCommand(o *options) *cobra.Command {
	var to int64
	out := output.NewFlags(false)
	cmd := withOutput(&cobra.Command{
		Use:   "undo NODECONFIG [--to-revision N]",
		Short: "Roll a NodeConfig back to a revision of its history, as kubectl rollout undo",
		Long: `undo rolls out a revision of the NodeConfig's history again (kubectl nodeconfig
history lists them): by default the one numbered below the current one, or
--to-revision N. It sets spec.source.revision: the nodes get that revision's
bytes even if its ConfigMap was edited or deleted since, through the normal
rollout (maxInTrial, maxFailures, pause and maintenance windows apply). A
revision that is not kept is refused and nothing changes. To follow the
ConfigMap again, remove spec.source.revision:
  kubectl patch nodeconfig NODECONFIG --type=merge -p '{"spec":{"source":{"revision":null}}}'

-o json prints: {name, revision, changed, generation, resourceVersion}
-o name prints nodeconfig.nodeconfig.io/NODECONFIG.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: o.completeNodeConfigs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if to < 0 {
				return fmt.Errorf("--to-revision %d: want a revision number of at least 1", to)
			}
			ctx := cmd.Context()
			c, err := o.connect()
			if err != nil {
				return err
			}
			client := nodeconfigs.Client{NodeConfigs: c.NodeConfigs}
			nc, err := client.Get(ctx, args[0])
			if err != nil {
				return fmt.Errorf("NodeConfig %s: %w", args[0], err)
			}
			if nodeconfigs.ConfigMapOf(nc) == nil {
				return fmt.Errorf("NodeConfig %s names no ConfigMap: its nodes use their local defaults, there is nothing to undo", nc.Name)
			}
			revs, err := history.List(ctx, c.Kube, o.namespace(), nc)
			if err != nil {
				return err
			}
			target, err := history.UndoTarget(nc.Name, revs, to)
			if err != nil {
				return err
			}
			r := UndoResult{Name: nc.Name, Revision: target, Generation: nc.Generation, ResourceVersion: nc.ResourceVersion}
			if cur := nc.Spec.Source.Revision; cur == nil || *cur != target {
				updated, err := client.SetRevision(ctx, nc, target)
				if err != nil {
					return fmt.Errorf("NodeConfig %s: %w", nc.Name, err)
				}
				r.Changed, r.Generation, r.ResourceVersion = true, updated.Generation, updated.ResourceVersion
			}
			return out.Print(o.stdout, output.Result{
				Kind: "UndoResult", Value: r, Names: []output.Ref{{GroupKind: nodeConfigKind, Name: nc.Name}},
				Text: func(w io.Writer) error { _, err := fmt.Fprintln(w, UndoText(r)); return err },
			})
		},
	}, out)
	cmd.Flags().Int64Var(&to, "to-revision", 0, "the revision to roll out (default: the one before the current one)")
	return cmd
}

// UndoText is undo's text output.
func UndoText(r UndoResult) string {
	if !r.Changed {
		return fmt.Sprintf("NodeConfig %s already rolls out revision %d (spec.source.revision); nothing changed.", r.Name, r.Revision)
	}
	return fmt.Sprintf("NodeConfig %s rolls out revision %d (spec.source.revision=%d, generation %d) at its pace: maxInTrial, pause and windows apply.", r.Name, r.Revision, r.Revision, r.Generation)
}
