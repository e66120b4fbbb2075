// Package cli is the command line of kubectl-nodeconfig: its flags and
// commands, each reading the Kubernetes API and the reconciler and handing
// what it read to the package that explains or prints it.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/kube"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/nodeconfigs"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/output"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/reconciler"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/report"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/safeout"
)

// Main runs the command line and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	return runWith(context.Background(), args, stdout, stderr, nil)
}

// runWith is Main within ctx, with the clients connect gives (nil: from
// the flags).
func runWith(ctx context.Context, args []string, stdout, stderr io.Writer, connect func() (*kube.Clients, error)) int {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// What the nodes wrote reaches the terminal shown, not obeyed.
	stdout, stderr = safeout.Writer(stdout), safeout.Writer(stderr)
	o := newOptions(stdout, stderr)
	if connect != nil {
		o.connect = connect
	}
	cmd := newRoot(o)
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx); err != nil {
		var code exitCode
		if errors.As(err, &code) {
			return int(code)
		}
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	return 0
}

// exitCode ends the command with that code and prints nothing more: the
// command's output said why.
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }

// options are the flags every command has.
type options struct {
	config         *genericclioptions.ConfigFlags
	reconciler     reconciler.Options
	timeout        time.Duration
	stdout, stderr io.Writer
	// connect builds the Kubernetes clients; tests give fakes.
	connect func() (*kube.Clients, error)
}

func newOptions(stdout, stderr io.Writer) *options {
	o := &options{stdout: stdout, stderr: stderr, config: genericclioptions.NewConfigFlags(true)}
	// -n is the install's namespace: the NodeConfigs and Nodes are not
	// namespaced, and a context's namespace is its user's, not the
	// install's.
	*o.config.Namespace = reconciler.DefaultNamespace
	o.connect = func() (*kube.Clients, error) { return kube.Connect(o.config) }
	return o
}

// newRoot builds the root command.
func newRoot(o *options) *cobra.Command {
	root := &cobra.Command{
		Use:   "kubectl-nodeconfig",
		Short: "See and steer nodeconfig's rollouts of kubelet config",
		Long: `kubectl nodeconfig shows where each node stands with the config its NodeConfig
rolls out, grouped by outcome, explains why, previews what a node would run,
pauses or resumes a rollout, lists and undoes its revisions (history, undo),
and checks a NodeConfig and its payload offline (validate).

It reads the Kubernetes API with kubectl's flags (--kubeconfig, --context,
--as, --token, --server, --request-timeout, ...; -n is the namespace of the
install, default nodeconfig-system) and the reconciler's gRPC API. The
reconciler is reached at --reconciler ADDRESS (host:port, plaintext, or
unix:/path; 'make run' serves it at 127.0.0.1:7603) or, without it, through a
port-forward to the pod holding the Lease nodeconfig-reconciler in -n.
status and why still print what the API server shows when the reconciler
cannot be reached; diff needs it.

Every command takes -o json|yaml|name|jsonpath=...|go-template=... (status
also -o wide); the fields are listed in each command's --help.`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl nodeconfig"},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(o.stdout)
	root.SetErr(o.stderr)
	f := root.PersistentFlags()
	o.config.AddFlags(f)
	f.Lookup("namespace").Usage = "namespace of the install: the reconciler's pods and Lease, and the NodeConfigs' revisions"
	f.Lookup("namespace").DefValue = reconciler.DefaultNamespace
	f.StringVar(&o.reconciler.Address, "reconciler", "", "the reconciler's gRPC address, host:port (plaintext) or unix:/path; empty: port-forward to the leader's pod")
	f.StringVar(&o.reconciler.Lease, "lease", reconciler.DefaultLease, "name of the Lease the reconciler's leader holds")
	f.IntVar(&o.reconciler.Port, "reconciler-port", reconciler.DefaultPort, "the reconciler's gRPC port in its pod")
	f.DurationVar(&o.timeout, "reconciler-timeout", 10*time.Second, "how long to wait for the reconciler's answer")

	root.AddCommand(statusCommand(o), whyCommand(o), diffCommand(o), pauseCommand(o, true), pauseCommand(o, false),
		historyCommand(o), undoCommand(o), validateCommand(o), versionCommand(o))
	return root
}

// namespace is the install's namespace (-n).
func (o *options) namespace() string { return *o.config.Namespace }

// reconcilerOptions say how to reach the reconciler.
func (o *options) reconcilerOptions() reconciler.Options {
	r := o.reconciler
	r.Namespace = o.namespace()
	return r
}

// reach connects to the reconciler; on failure the Reconciler says why.
func (o *options) reach(ctx context.Context, c *kube.Clients) (*reconciler.Conn, report.Reconciler) {
	conn, err := reconciler.Connect(ctx, o.reconcilerOptions(), c.Config, c.Kube)
	if err != nil {
		return nil, report.Reconciler{Error: err.Error()}
	}
	return conn, report.Reconciler{Reachable: true, Via: conn.Via}
}

// call bounds one call to the reconciler by --reconciler-timeout.
func (o *options) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, o.timeout)
}

// withOutput adds -o to cmd and checks its value before cmd runs.
func withOutput(cmd *cobra.Command, out *output.Flags) *cobra.Command {
	out.AddFlags(cmd)
	cmd.PreRunE = func(*cobra.Command, []string) error { return out.Validate() }
	return cmd
}

// unreachable says whether a reconciler's error means it did not answer
// (as opposed to answering no).
func unreachable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.Internal:
		return true
	}
	return false
}

// grpcText is a reconciler's error without the rpc error prefix.
func grpcText(err error) string {
	s := status.Convert(err)
	return s.Code().String() + ": " + s.Message()
}

// getNodeConfigs returns the named NodeConfig, or all of them.
func getNodeConfigs(ctx context.Context, c *kube.Clients, name string) ([]v1alpha1.NodeConfig, error) {
	client := nodeconfigs.Client{NodeConfigs: c.NodeConfigs}
	if name == "" {
		return client.List(ctx)
	}
	nc, err := client.Get(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("NodeConfig %s: %w", name, err)
	}
	return []v1alpha1.NodeConfig{*nc}, nil
}

// Kinds that -o name prints.
var (
	nodeKind       = schema.GroupKind{Kind: "Node"}
	nodeConfigKind = v1alpha1.SchemeGroupVersion.WithKind("NodeConfig").GroupKind()
)

func warn(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "warning: "+format+"\n", args...)
}
