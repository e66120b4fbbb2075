package cli

import (
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// completeNodeConfigs completes the one NODECONFIG argument from the API
// server, as kubectl completes resource names.
func (o *options) completeNodeConfigs(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	c, err := o.connect()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	list, err := c.NodeConfigs.NodeConfigV1alpha1().NodeConfigs().List(cmd.Context(), metav1.ListOptions{})
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var out []string
	for _, nc := range list.Items {
		if strings.HasPrefix(nc.Name, toComplete) {
			out = append(out, nc.Name)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeNodes completes the one NODE argument from the API server.
func (o *options) completeNodes(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	c, err := o.connect()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	// From the API server's watch cache: a name to complete needs no
	// quorum read of the whole fleet.
	list, err := c.Kube.CoreV1().Nodes().List(cmd.Context(), metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var out []string
	for _, n := range list.Items {
		if strings.HasPrefix(n.Name, toComplete) {
			out = append(out, n.Name)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
