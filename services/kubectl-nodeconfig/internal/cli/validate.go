package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/configcheck"
	"nodeconfig.io/services/configcheck/kubeletexec"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/output"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/validate"
)

// Exit codes of validate, as nodeconfig-kubelet-check's: 1 when something
// is refused, 2 when something has no verdict and nothing is refused.
const (
	exitRefused  exitCode = 1
	exitUnjudged exitCode = 2
)

func validateCommand(o *options) *cobra.Command {
	out := output.NewFlags(false)
	var files []string
	opts := validate.Options{}
	kubeletCheck, node := "", ""
	cmd := withOutput(&cobra.Command{
		Use:   "validate -f FILE... [--node NODE]",
		Short: "Check NodeConfigs and their payloads offline, as the reconciler does before any node gets them",
		Long: `validate runs, without a cluster, the checks the reconciler runs on a new
version before it assigns it to any node (README: the central check): the
field policy (--allow-kubelet-fields, --allow-validator-none, as the
reconciler's flags), then the NodeConfig's validator on its payload.

The files (-f, repeated; - for stdin) hold YAML or JSON documents:
  NodeConfig            its selector and validator are checked, and its payload,
                        taken from the ConfigMap it names, which must be in the files
  ConfigMap             one no NodeConfig in the files names: each key is a payload
  KubeletConfiguration  a bare drop-in
Payloads no NodeConfig names are judged by --validator (default kubelet).

The kubelet validator is the reconciler's: the binary nodeconfig-kubelet-check
(--kubelet-check-binary; by default next to this plugin, then on $PATH; make
build puts both in bin/, or: go install
nodeconfig.io/services/configcheck/cmd/nodeconfig-kubelet-check).

With --node NODE, every payload the central check does not refuse is also
judged on that node, as the node judges it on activation: its agent merges
it with the node's own files (the kubelet's --config file and the other
drop-ins, in the kubelet's order) in the place of nodeconfig's drop-in, and
validates the result with the kubelet's code. It prints the node's verdict
and the unified diff of the node's effective config, and notes a NodeConfig
that does not select the node. Nothing is written: it asks the reconciler
(PreviewNode, as diff does), which asks the node; it needs both.

Exit status: 0 when everything passed, 1 when something is refused (the
reasons are printed) or the input is bad (the error says why), 2 when
something has no verdict (the validator could not run, a NodeConfig's
ConfigMap is not in the files, or the node could not answer) and nothing
is refused. With --node, a check counts as its worst verdict of its own
and the node's.

-o json prints:
  node: the --node
  checks: [{object, file, document, payload, validator,
            verdict (Passed, Refused, Unjudged), reason,
            node: {node, selected, verdict, reason, files, merged,
                   current, candidate, diff}}]
  passed, refused, unjudged: counts`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return errors.New("give the files to check with -f FILE")
			}
			var in []validate.File
			for _, name := range files {
				var data []byte
				var err error
				if name == "-" {
					data, err = io.ReadAll(cmd.InOrStdin())
				} else {
					data, err = os.ReadFile(name)
				}
				if err != nil {
					return err
				}
				in = append(in, validate.File{Name: name, Data: data})
			}
			opts.Checker = configcheck.Checker{Kubelet: kubeletChecker(kubeletCheck)}
			r, err := validate.Run(cmd.Context(), in, opts)
			if err != nil {
				return err
			}
			if node != "" {
				if err := o.validateOnNode(cmd.Context(), &r, node); err != nil {
					return err
				}
			}
			if err := out.Print(o.stdout, output.Result{Kind: "Validation", Value: r, Text: func(w io.Writer) error { return validate.Text(w, r) }}); err != nil {
				return err
			}
			switch {
			case r.Refused > 0:
				return exitRefused
			case r.Unjudged > 0:
				return exitUnjudged
			}
			return nil
		},
	}, out)
	f := cmd.Flags()
	f.StringArrayVarP(&files, "filename", "f", nil, "a file of NodeConfigs, ConfigMaps or KubeletConfigurations to check (- for stdin); repeat for more")
	f.StringVar(&opts.Validator, "validator", "kubelet", "the validator of payloads no NodeConfig in the files names: kubelet, yaml, json or none")
	f.StringVar(&node, "node", "", "also judge each payload on this node, merged with its own files, as it would on activation (needs the reconciler)")
	f.StringVar(&kubeletCheck, "kubelet-check-binary", "", "the kubelet validator, "+kubeletexec.Binary+" (default: next to this plugin, then on $PATH)")
	// The field policy's flags are the reconciler's own.
	gofs := flag.NewFlagSet("validate", flag.ContinueOnError)
	opts.Rules.Register(gofs)
	f.AddGoFlagSet(gofs)
	_ = cmd.MarkFlagFilename("filename", "yaml", "yml", "json")
	_ = cmd.RegisterFlagCompletionFunc("node", o.completeNodes)
	_ = cmd.RegisterFlagCompletionFunc("validator", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"kubelet", "yaml", "json", "none"}, cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

// validateOnNode judges r's payloads on node through the reconciler's
// PreviewNode: the node's agent merges each with the node's files.
func (o *options) validateOnNode(ctx context.Context, r *validate.Report, node string) error {
	c, err := o.connect()
	if err != nil {
		return err
	}
	n, err := c.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("--node %s: %w", node, err)
	}
	conn, rec := o.reach(ctx, c)
	if conn == nil {
		return fmt.Errorf("validate --node needs the reconciler, which is not reachable: %s", rec.Error)
	}
	defer conn.Close()
	return validate.OnNode(ctx, r, node, n.Labels, func(ctx context.Context, payload []byte, v nodeconfigv1.Validator) (*nodeconfigv1.PreviewNodeResponse, error) {
		callCtx, cancel := o.call(ctx)
		defer cancel()
		resp, err := conn.PreviewNode(callCtx, &nodeconfigv1.PreviewNodeRequest{
			NodeName: node, Candidate: &nodeconfigv1.PreviewConfigRequest{Payload: payload, Validator: v},
		})
		switch {
		case err == nil && !resp.GetCandidate():
			return nil, fmt.Errorf("the reconciler at %s previewed node %s's desired config, not the file's: it predates validate --node, upgrade it", conn.Via, node)
		case err == nil:
			return resp, nil
		case status.Code(err) == codes.Unimplemented:
			return nil, fmt.Errorf("the reconciler at %s does not implement PreviewNode: it predates validate --node, upgrade it", conn.Via)
		case status.Code(err) == codes.FailedPrecondition:
			// The node's agent could not answer: this payload has no
			// verdict of the node's.
			return nil, &validate.NoAnswerError{Err: errors.New(status.Convert(err).Message())}
		case unreachable(err):
			return nil, fmt.Errorf("validate --node needs the reconciler, which is not reachable: %s: %s", conn.Via, grpcText(err))
		default:
			return nil, fmt.Errorf("node %s: %s", node, grpcText(err))
		}
	})
}

// kubeletChecker runs the kubelet validator binary as the reconciler does:
// at path, else next to this plugin, else on $PATH. Without one, every
// kubelet payload is left without a verdict, saying how to get it.
func kubeletChecker(path string) func(context.Context, []byte) error {
	if path == "" {
		if p := kubeletexec.DefaultPath(); kubeletexec.Verify(p) == nil {
			path = p
		} else if p, err := exec.LookPath(kubeletexec.Binary); err == nil {
			path = p
		}
	}
	if path == "" {
		return func(context.Context, []byte) error {
			return &configcheck.UnavailableError{Validator: "kubelet", Err: fmt.Errorf(
				"%s is neither next to this plugin nor on $PATH: go install nodeconfig.io/services/configcheck/cmd/%s, or give --kubelet-check-binary",
				kubeletexec.Binary, kubeletexec.Binary)}
		}
	}
	return kubeletexec.Runner{Path: path}.Check
}
