package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"nodeconfig.io/services/kubectl-nodeconfig/internal/kube"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/output"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/reconciler"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/version"
)

// VersionResult is version's output; its JSON is `-o json`.
type VersionResult struct {
	Client version.Info `json:"client"`
	// Server is the Kubernetes API server's version, absent with --client.
	Server *ServerVersion `json:"server,omitempty"`
	// Reconciler is the leading reconciler's pod and images, absent with
	// --client.
	Reconciler *ReconcilerVersion `json:"reconciler,omitempty"`
}

// ServerVersion is the API server's version, or why it is not known.
type ServerVersion struct {
	GitVersion string `json:"gitVersion,omitempty"`
	Platform   string `json:"platform,omitempty"`
	Error      string `json:"error,omitempty"`
}

// ReconcilerVersion is what runs the leading reconciler, or why it is not
// known.
type ReconcilerVersion struct {
	Pod    string   `json:"pod,omitempty"`
	Images []string `json:"images,omitempty"`
	Error  string   `json:"error,omitempty"`
}

func versionCommand(o *options) *cobra.Command {
	out := output.NewFlags(false)
	client := false
	cmd := withOutput(&cobra.Command{
		Use:   "version",
		Short: "Print the plugin's build, the API server's version and the leading reconciler's image",
		Long: `version prints the plugin's build (version, commit, Go), and unless --client the
Kubernetes API server's version and the image of the reconciler's leading pod
(the one holding the Lease in -n). A server that cannot be reached is said,
not an error.

-o json prints:
  client:     {version, commit, modified, goVersion, platform}
  server:     {gitVersion, platform, error}, absent with --client
  reconciler: {pod, images, error}, absent with --client`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r := VersionResult{Client: version.Get()}
			if !client {
				c, err := o.connect()
				if err != nil {
					r.Server = &ServerVersion{Error: err.Error()}
				} else {
					r.Server, r.Reconciler = serverVersion(c), o.reconcilerVersion(cmd.Context(), c)
				}
			}
			return out.Print(o.stdout, output.Result{Kind: "Version", Value: r, Text: func(w io.Writer) error { return versionText(w, r) }})
		},
	}, out)
	cmd.Flags().BoolVar(&client, "client", false, "the plugin's build only; ask no server")
	return cmd
}

func serverVersion(c *kube.Clients) *ServerVersion {
	v, err := c.Kube.Discovery().ServerVersion()
	if err != nil {
		return &ServerVersion{Error: err.Error()}
	}
	return &ServerVersion{GitVersion: v.GitVersion, Platform: v.Platform}
}

func (o *options) reconcilerVersion(ctx context.Context, c *kube.Clients) *ReconcilerVersion {
	ro := o.reconcilerOptions()
	pod, err := reconciler.Leader(ctx, c.Kube, ro.Namespace, ro.Lease)
	if err != nil {
		return &ReconcilerVersion{Error: err.Error()}
	}
	r := &ReconcilerVersion{Pod: ro.Namespace + "/" + pod.Name}
	for _, ctr := range pod.Spec.Containers {
		r.Images = append(r.Images, ctr.Image)
	}
	return r
}

func versionText(w io.Writer, r VersionResult) error {
	c := r.Client
	line := fmt.Sprintf("Client: kubectl-nodeconfig %s (%s", c.Version, c.GoVersion)
	if c.Commit != "" {
		line += ", commit " + c.Commit
		if c.Modified {
			line += ", modified"
		}
	}
	if _, err := fmt.Fprintln(w, line+", "+c.Platform+")"); err != nil {
		return err
	}
	if s := r.Server; s != nil {
		if s.Error != "" {
			fmt.Fprintf(w, "Server: not reachable (%s)\n", s.Error)
		} else {
			fmt.Fprintf(w, "Server: Kubernetes %s (%s)\n", s.GitVersion, s.Platform)
		}
	}
	if rv := r.Reconciler; rv != nil {
		switch {
		case rv.Error != "":
			fmt.Fprintf(w, "Reconciler: not known (%s)\n", rv.Error)
		default:
			fmt.Fprintf(w, "Reconciler: pod %s, image %v\n", rv.Pod, rv.Images)
		}
	}
	return nil
}
