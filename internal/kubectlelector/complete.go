package kubectlelector

import (
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// completeLeases completes the one LEASE argument with the names of the Leases of the namespace the flags
// select (cobra's __complete, which `kubectl elector completion SHELL` scripts and kubectl's plugin
// completion call). On any error it completes nothing, quietly, as kubectl does.
func completeLeases(flags *genericclioptions.ConfigFlags, deps Deps) cobra.CompletionFunc {
	return func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		kube, ns, err := clientAndNamespace(flags, deps)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		list, err := kube.CoordinationV1().Leases(ns).List(c.Context(), metav1.ListOptions{})
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, l := range list.Items {
			if strings.HasPrefix(l.Name, toComplete) {
				out = append(out, l.Name)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
