// Package kubectlelector is the kubectl plugin `kubectl elector`: it shows
// the election on a Lease (holder, fencing token, renewal, expiry and the
// Events the sidecar records on the Lease) and follows leadership changes
// with a watch. cmd/kubectl-elector is its thin main.
package kubectlelector

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// Exit codes of the plugin.
const (
	// ExitOK: the command did what it was asked (watch: stopped by Ctrl-C).
	ExitOK = 0
	// ExitError: the command ran and failed (an API error such as NotFound or
	// Forbidden, no kubeconfig, an unreachable API server).
	ExitError = 1
	// ExitUsage: bad flags or arguments; nothing was sent to the API server.
	ExitUsage = 2
)

// Deps are what the command talks to. Zero fields get the real thing.
type Deps struct {
	// NewClient returns a clientset for the configuration the flags select
	// (default: kubernetes.NewForConfig of flags.ToRESTConfig()).
	NewClient func(flags *genericclioptions.ConfigFlags) (kubernetes.Interface, error)
	// Clock gives "now" for RENEWED, EXPIRES IN and watch lines.
	Clock clock.PassiveClock
	// Forward opens a tunnel to port of pod ns/name and returns the base URL to
	// reach it and a stop function (default: a port-forward through the API
	// server, as kubectl port-forward).
	Forward func(ctx context.Context, flags *genericclioptions.ConfigFlags, ns, pod string, port int) (baseURL string, stop func(), err error)
}

func (d Deps) withDefaults() Deps {
	if d.NewClient == nil {
		d.NewClient = func(flags *genericclioptions.ConfigFlags) (kubernetes.Interface, error) {
			cfg, err := flags.ToRESTConfig()
			if err != nil {
				return nil, err
			}
			return kubernetes.NewForConfig(cfg)
		}
	}
	if d.Clock == nil {
		d.Clock = clock.RealClock{}
	}
	if d.Forward == nil {
		d.Forward = portForward
	}
	return d
}

// usageError is a bad flag or argument: exit 2.
type usageError struct{ error }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// runError is a failure of a command that ran: exit 1.
type runError struct{ error }

func (e runError) Unwrap() error { return e.error }

// Run runs the plugin with args (without the program name) and returns the
// exit code. Errors are printed to streams.ErrOut as one line, kubectl-style:
// "Error from server (NotFound): ..." for API errors, "error: ..." otherwise.
func Run(ctx context.Context, args []string, streams genericiooptions.IOStreams, deps Deps) int {
	cmd := NewCommand(streams, deps)
	cmd.SetArgs(args)
	sub, err := cmd.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	var re runError
	if errors.As(err, &re) {
		_, _ = fmt.Fprintln(streams.ErrOut, formatError(re.error))
		return ExitError
	}
	// Everything else comes from parsing: an unknown flag or command, a bad
	// argument count, or a flag value our own checks refused.
	name := "kubectl elector"
	if sub != nil && sub != cmd {
		name += " " + sub.Name()
	}
	fmt.Fprintf(streams.ErrOut, "error: %s (see '%s --help')\n", oneLine(err.Error()), name)
	return ExitUsage
}

// formatError renders err the way kubectl does.
func formatError(err error) string {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		if s := st.Status(); s.Reason != "" {
			return oneLine(fmt.Sprintf("Error from server (%s): %s", s.Reason, err.Error()))
		}
		return oneLine("Error from server: " + err.Error())
	}
	return "error: " + oneLine(err.Error())
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.TrimSpace(s)), " ")
}

// NewCommand returns the `kubectl elector` command tree.
func NewCommand(streams genericiooptions.IOStreams, deps Deps) *cobra.Command {
	deps = deps.withDefaults()
	flags := genericclioptions.NewConfigFlags(true)
	root := &cobra.Command{
		Use:   "kubectl-elector",
		Short: "Show, follow and release elector-sidecar elections on Leases",
		Long: `Show and follow elector-sidecar elections: the holder of a coordination.k8s.io/v1 Lease,
its fencing token (spec.leaseTransitions), when it was last renewed and when it expires,
and the Events the sidecars record on the Lease; make a holder release its term.

Shell completion (Lease names too): 'kubectl elector completion bash|zsh|fish|powershell'
prints the script for kubectl-elector; for 'kubectl elector <TAB>', put an executable
kubectl_complete-elector on PATH that runs: kubectl-elector __complete "$@"

Exit codes: 0 success, 1 the command failed (e.g. the Lease does not exist, no access,
API server unreachable), 2 bad flags or arguments.`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl elector"},
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return c.Help()
		},
	}
	flags.AddFlags(root.PersistentFlags())
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.CompletionOptions.HiddenDefaultCmd = false
	root.AddCommand(newStatusCommand(streams, flags, deps), newWatchCommand(streams, flags, deps), newReleaseCommand(streams, flags, deps),
		newVersionCommand(streams))
	return root
}

// noArgs refuses arguments, naming the unknown command.
func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unknown command %q for %q", args[0], c.CommandPath())
	}
	return nil
}

// clientAndNamespace builds the client and resolves the namespace as kubectl
// does: -n, else the kubeconfig context's namespace, else "default".
func clientAndNamespace(flags *genericclioptions.ConfigFlags, deps Deps) (kubernetes.Interface, string, error) {
	ns, _, err := flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, "", err
	}
	client, err := deps.NewClient(flags)
	if err != nil {
		return nil, "", err
	}
	return client, ns, nil
}
