package cli

import (
	"context"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	ncinformers "nodeconfig.io/services/api/client/informers"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/kube"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/output"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/reconciler"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/report"
	statusview "nodeconfig.io/services/kubectl-nodeconfig/internal/status"
)

// DefaultPerGroup is how many nodes of each group status lists by
// default: with the seven groups at most, a NodeConfig fits a screen
// whatever its fleet.
const DefaultPerGroup = 5

// statusFlags are status's own flags.
type statusFlags struct {
	out      *output.Flags
	all      bool
	perGroup int
	phases   []string
	selector string
	watch    bool
	// refresh is how often --watch asks the reconciler again and
	// prints what changed; events from the API server print sooner.
	refresh time.Duration
}

func (f *statusFlags) textOptions() statusview.TextOptions {
	o := statusview.TextOptions{Now: time.Now(), PerGroup: f.perGroup}
	if f.all || len(f.phases) > 0 {
		o.PerGroup = 0
	}
	return o
}

func statusCommand(o *options) *cobra.Command {
	sf := &statusFlags{out: output.NewFlags(true)}
	cmd := withOutput(&cobra.Command{
		Use:   "status [NODECONFIG]",
		Short: "Per NodeConfig its conditions and its nodes grouped by outcome, with counts",
		Long: `status prints, for each NodeConfig (or the one named), its Ready, Progressing
and Degraded conditions (STATUS/REASON), whether it is paused and its node
counts; then its nodes grouped by outcome, with the count of each group:

  ` + outcomeHelp() + `

and the first ` + fmt.Sprint(DefaultPerGroup) + ` nodes of each group (--per-group N; --all or --phase for every
one), one line per node: the NodeConfigReady condition's reason (PHASE) and
status (READY), the reconciler's lifecycle state, the versions the node
reports in its nodeconfig.io/config-status annotation (the ConfigMap's
resourceVersion; "local" for the local default; "?" before the node
reports), when its soak ends, and its error.

--phase keeps the nodes of those outcomes or phases (Refused, RolledBack,
...; comma-separated or repeated), -l the nodes whose labels match (as
kubectl get nodes -l). --watch prints it again whenever it changes, until
Ctrl-C. -o wide prints every node listed in one table, -o name their names
(node/NAME).

-o json prints:
  reconciler:  {reachable, via, error}
  nodeConfigs: [{
    name, paused,
    source:      {namespace, name, key}, null for the local default
    ready, progressing, degraded: ` + jsonCondition + ` or null
    nextWindow:  RFC 3339, absent unless nodes wait for a window
    waves:       {topologyKey, order: [values; "" is the nodes without the
                 label], count, current (from 1; 0: none under way)},
                 absent without spec.rollout.topologyKey
    counts:      {selected, active, soaking, waiting, rolledBack, failing}
    groups:      [{outcome, nodes}] every selected node counted, in the order above
    nodes: [{    every node listed (--phase keeps some)
      name, outcome, phase (the condition's reason), ready (its status), message,
      assigned, active, lastKnownGood: ` + jsonVersion + `
      reported (false before the node's annotation reads), error,
      reconcilerState (SOAKING, WAITING, ...; absent when unknown),
      soakEnds (RFC 3339; absent unless soaking)
    }]
  }]`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: o.completeNodeConfigs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := o.connect()
			if err != nil {
				return err
			}
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			if sf.watch {
				return o.watchStatus(ctx, c, name, sf)
			}
			ncs, err := getNodeConfigs(ctx, c, name)
			if err != nil {
				return err
			}
			nodes, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sf.selector})
			if err != nil {
				return fmt.Errorf("list nodes: %w", err)
			}
			conn, rec := o.reach(ctx, c)
			defer conn.Close()
			r := o.buildStatus(ctx, conn, rec, ncs, nodes.Items, sf.phases)
			return sf.out.Print(o.stdout, statusResult(r, sf))
		},
	}, sf.out)
	f := cmd.Flags()
	f.BoolVar(&sf.all, "all", false, "list every node of every group")
	f.IntVar(&sf.perGroup, "per-group", DefaultPerGroup, "how many nodes of each group to list (0: every one)")
	f.StringSliceVar(&sf.phases, "phase", nil, "list only the nodes of these outcomes or phases (e.g. Refused, RolledBack), comma-separated")
	f.StringVarP(&sf.selector, "selector", "l", "", "only the nodes whose labels match this selector (as kubectl get nodes -l)")
	f.BoolVarP(&sf.watch, "watch", "w", false, "print the status again whenever it changes, until Ctrl-C")
	f.DurationVar(&sf.refresh, "watch-refresh", 5*time.Second, "with --watch, how often to ask the reconciler again")
	_ = f.MarkHidden("watch-refresh")
	_ = cmd.RegisterFlagCompletionFunc("phase", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return statusview.Outcomes, cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

func outcomeHelp() string {
	var lines []string
	for _, o := range statusview.Outcomes {
		lines = append(lines, fmt.Sprintf("%-11s %s", o, statusview.OutcomeMeaning(o)))
	}
	return strings.Join(lines, "\n  ")
}

// statusResult is how status prints r.
func statusResult(r statusview.Report, sf *statusFlags) output.Result {
	var names []output.Ref
	for _, n := range r.Names() {
		names = append(names, output.Ref{GroupKind: nodeKind, Name: n})
	}
	return output.Result{
		Kind: "Status", Value: r, Names: names,
		Text:  func(w io.Writer) error { return statusview.Text(w, r, sf.textOptions()) },
		Table: func() *metav1.Table { return statusview.Table(r, time.Now()) },
	}
}

// buildStatus joins what the API server and the reconciler say.
func (o *options) buildStatus(ctx context.Context, conn *reconciler.Conn, rec report.Reconciler, ncs []v1alpha1.NodeConfig, nodes []corev1.Node, phases []string) statusview.Report {
	in := statusview.Input{NodeConfigs: ncs, Nodes: nodes, Reconciler: rec, Phases: phases}
	if conn != nil {
		callCtx, cancel := o.call(ctx)
		resp, err := conn.ListNodes(callCtx, &nodeconfigv1.ListNodesRequest{})
		cancel()
		if err != nil {
			in.Reconciler = report.Reconciler{Via: conn.Via, Error: conn.Via + ": " + grpcText(err)}
		} else {
			in.States = map[string]*nodeconfigv1.NodeState{}
			for _, st := range resp.GetNodes() {
				in.States[st.GetNodeName()] = st
			}
		}
	}
	return statusview.Build(in)
}

// watchStatus prints the status, then again each time it changes: the
// Nodes and NodeConfigs are watched through informers (one list, then
// events), the reconciler is asked again every --watch-refresh. Bursts of
// events print once a second at most. It ends with ctx (Ctrl-C).
func (o *options) watchStatus(ctx context.Context, c *kube.Clients, name string, sf *statusFlags) error {
	kf := informers.NewSharedInformerFactoryWithOptions(c.Kube, 0, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
		lo.LabelSelector = sf.selector
	}))
	nf := ncinformers.NewSharedInformerFactory(c.NodeConfigs, 0)
	nodes, ncs := kf.Core().V1().Nodes(), nf.NodeConfig().V1alpha1().NodeConfigs()
	var dirty atomic.Bool
	mark := func(any) { dirty.Store(true) }
	poke := cache.ResourceEventHandlerFuncs{AddFunc: mark, UpdateFunc: func(_, n any) { mark(n) }, DeleteFunc: mark}
	if _, err := nodes.Informer().AddEventHandler(poke); err != nil {
		return err
	}
	if _, err := ncs.Informer().AddEventHandler(poke); err != nil {
		return err
	}
	kf.Start(ctx.Done())
	nf.Start(ctx.Done())
	defer kf.Shutdown()
	defer nf.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), nodes.Informer().HasSynced, ncs.Informer().HasSynced) {
		return nil // Ctrl-C before the first list
	}
	conn, rec := o.reach(ctx, c)
	defer conn.Close()

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last *statusview.Report
	asked := time.Time{}
	for first := true; ; first = false {
		if first || dirty.Swap(false) || time.Since(asked) >= sf.refresh {
			asked = time.Now()
			all, err := ncs.Lister().List(labels.Everything())
			if err != nil {
				return err
			}
			var selected []v1alpha1.NodeConfig
			for _, nc := range all {
				if name == "" || nc.Name == name {
					selected = append(selected, *nc)
				}
			}
			slices.SortFunc(selected, func(a, b v1alpha1.NodeConfig) int { return strings.Compare(a.Name, b.Name) })
			if name != "" && len(selected) == 0 && first {
				return fmt.Errorf("NodeConfig %s: not found", name)
			}
			nodeList, err := nodes.Lister().List(labels.Everything())
			if err != nil {
				return err
			}
			items := make([]corev1.Node, len(nodeList))
			for i, n := range nodeList {
				items[i] = *n
			}
			r := o.buildStatus(ctx, conn, rec, selected, items, sf.phases)
			if last == nil || !reflect.DeepEqual(*last, r) {
				if last != nil && sf.out.IsText() {
					fmt.Fprintf(o.stdout, "\n--- %s ---\n", time.Now().Format(time.TimeOnly))
				}
				if err := sf.out.Print(o.stdout, statusResult(r, sf)); err != nil {
					return err
				}
				last = &r
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
