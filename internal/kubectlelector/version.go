package kubectlelector

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/elector-sidecar/elector-sidecar/pkg/version"
)

// newVersionCommand: `kubectl elector version` prints the plugin's version as `elector-sidecar --version` does
// (the release's X.Y.Z, the same as the image tag and the chart's appVersion), then the revision and Go version.
func newVersionCommand(streams genericiooptions.IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version (the elector-sidecar release it belongs to)",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintf(streams.Out, "kubectl-elector %s (revision %s, %s)\n", version.Version, version.GetRevision(), runtime.Version())
			return err
		},
	}
}
