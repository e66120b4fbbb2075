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
	kubeletCheck := ""
	cmd := withOutput(&cobra.Command{
		Use:   "validate -f FILE...",
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

Exit status: 0 when everything passed, 1 when something is refused (the
reasons are printed), 2 when something has no verdict (the validator could
not run, or a NodeConfig's ConfigMap is not in the files) and nothing is
refused.

-o json prints:
  checks: [{object, file, document, payload, validator,
            verdict (Passed, Refused, Unjudged), reason}]
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
	f.StringVar(&kubeletCheck, "kubelet-check-binary", "", "the kubelet validator, "+kubeletexec.Binary+" (default: next to this plugin, then on $PATH)")
	// The field policy's flags are the reconciler's own.
	gofs := flag.NewFlagSet("validate", flag.ContinueOnError)
	opts.Rules.Register(gofs)
	f.AddGoFlagSet(gofs)
	_ = cmd.MarkFlagFilename("filename", "yaml", "yml", "json")
	_ = cmd.RegisterFlagCompletionFunc("validator", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"kubelet", "yaml", "json", "none"}, cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
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
