// Package cli is the command line of kubectl-nodeconfig: its flags and
// commands, each reading the Kubernetes API and the reconciler and handing
// what it read to the package that explains or prints it.
package cli

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/kube"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/nodeconfigs"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/reconciler"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/report"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/safeout"
)

// Main runs the command line and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// What the nodes wrote reaches the terminal shown, not obeyed.
	stdout, stderr = safeout.Writer(stdout), safeout.Writer(stderr)
	cmd := New(stdout, stderr)
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	return 0
}

// options are the flags every command has.
type options struct {
	kube           kube.Flags
	reconciler     reconciler.Options
	output         string
	timeout        time.Duration
	requestTimeout time.Duration
	stdout, stderr io.Writer
}

// New builds the root command.
func New(stdout, stderr io.Writer) *cobra.Command {
	o := &options{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "kubectl-nodeconfig",
		Short: "See and steer nodeconfig's rollouts of kubelet config",
		Long: `kubectl nodeconfig shows where each node stands with the config its NodeConfig
rolls out, explains why, previews what a node would run, pauses or
resumes a rollout, and lists and undoes its revisions (history, undo).

It reads the Kubernetes API (kubeconfig as kubectl loads it: --kubeconfig,
$KUBECONFIG or ~/.kube/config, --context) and the reconciler's gRPC API. The
reconciler is reached at --reconciler ADDRESS (host:port, plaintext, or
unix:/path; 'make run' serves it at 127.0.0.1:7603) or, without it, through a
port-forward to the pod holding the Lease nodeconfig-reconciler in
--namespace. status and why still print what the API server shows when the
reconciler cannot be reached; diff needs it.

Every command takes -o json: its fields are listed in the command's --help.`,
		Annotations:       map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl nodeconfig"},
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: true},
		SilenceUsage:      true,
		SilenceErrors:     true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			switch o.output {
			case "", "text", "json":
				return nil
			}
			return fmt.Errorf("-o %q: want text or json", o.output)
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	f := root.PersistentFlags()
	f.StringVar(&o.kube.Kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&o.kube.Context, "context", "", "kubeconfig context to use")
	f.StringVar(&o.reconciler.Address, "reconciler", "", "the reconciler's gRPC address, host:port (plaintext) or unix:/path; empty: port-forward to the leader's pod")
	f.StringVarP(&o.reconciler.Namespace, "namespace", "n", reconciler.DefaultNamespace, "namespace of the reconciler's pods and Lease, and of the NodeConfigs' revisions")
	f.StringVar(&o.reconciler.Lease, "lease", reconciler.DefaultLease, "name of the Lease the reconciler's leader holds")
	f.IntVar(&o.reconciler.Port, "reconciler-port", reconciler.DefaultPort, "the reconciler's gRPC port in its pod")
	f.DurationVar(&o.timeout, "reconciler-timeout", 10*time.Second, "how long to wait for the reconciler's answer")
	f.DurationVar(&o.requestTimeout, "request-timeout", time.Minute, "how long the whole command may take")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")

	root.AddCommand(statusCommand(o), whyCommand(o), diffCommand(o), pauseCommand(o, true), pauseCommand(o, false), historyCommand(o), undoCommand(o))
	return root
}

func (o *options) json() bool { return o.output == "json" }

// connect builds the Kubernetes clients.
func (o *options) connect() (*kube.Clients, error) { return o.kube.Connect() }

// context bounds a command by --request-timeout.
func (o *options) context(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return context.WithTimeout(cmd.Context(), o.requestTimeout)
}

// reach connects to the reconciler; on failure the Reconciler says why.
func (o *options) reach(ctx context.Context, c *kube.Clients) (*reconciler.Conn, report.Reconciler) {
	conn, err := reconciler.Connect(ctx, o.reconciler, c.Config, c.Kube)
	if err != nil {
		return nil, report.Reconciler{Error: err.Error()}
	}
	return conn, report.Reconciler{Reachable: true, Via: conn.Via}
}

// call bounds one call to the reconciler by --reconciler-timeout.
func (o *options) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, o.timeout)
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

func warn(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "warning: "+format+"\n", args...)
}
