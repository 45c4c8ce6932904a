package kubectlelector

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"

	"github.com/elector-sidecar/elector-sidecar/pkg/client"
	"github.com/elector-sidecar/elector-sidecar/pkg/localapi"
)

// DefaultLocalAPIPort is the sidecar's local API port in the pod (the chart's sidecar.httpPort).
const DefaultLocalAPIPort = 4040

// releaseTimeout bounds the POST /release through the tunnel (the sidecar answers within its own
// localapi.ReleaseTimeout).
const releaseTimeout = localapi.ReleaseTimeout + 10*time.Second

type releaseOptions struct {
	pod  string
	port int
	out  time.Duration
}

func newReleaseCommand(streams genericiooptions.IOStreams, flags *genericclioptions.ConfigFlags, deps Deps) *cobra.Command {
	o := &releaseOptions{}
	c := &cobra.Command{
		Use:   "release LEASE [-n NAMESPACE] [--for=DURATION]",
		Short: "Make the Lease's holder give its token back (POST /release in the holder's pod)",
		Long: `Make the holder of a Lease step down: the plugin finds the holder's pod (the Lease's
spec.holderIdentity names it, as the chart's sidecars use the pod name; --pod overrides), opens
a port-forward to the pod's sidecar through the API server, as kubectl port-forward does, and
sends POST /release to its local API (port 4040, --port). The sidecar stops serving the token
and frees the Lease; another pod takes over at once. With --for the pod stays out of the
election that long (at most 24h, the local API's limit), e.g. before draining its node.

It needs, in the Lease's namespace: get on leases, get on pods and create on pods/portforward
(the built-in admin and edit roles have them).`,
		Example: `  kubectl elector release nightly-run -n team
  kubectl elector release nightly-run -n team --for=10m`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("release needs exactly one LEASE, got %d arguments", len(args))
			}
			return nil
		},
		ValidArgsFunction: completeLeases(flags, deps),
		RunE: func(c *cobra.Command, args []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			kube, ns, err := clientAndNamespace(flags, deps)
			if err != nil {
				return runError{err}
			}
			if err := o.run(c.Context(), kube, flags, deps, ns, args[0], streams.Out); err != nil {
				return runError{err}
			}
			return nil
		},
	}
	c.Flags().StringVar(&o.pod, "pod", "", "the pod whose sidecar releases (default: the Lease's holder)")
	c.Flags().IntVar(&o.port, "port", DefaultLocalAPIPort, "the sidecar's local API port in the pod")
	c.Flags().DurationVar(&o.out, "for", 0, fmt.Sprintf("stay out of the election this long after releasing (e.g. 10m; at most %v)", localapi.MaxReleaseFor))
	return c
}

func (o *releaseOptions) validate() error {
	if o.port < 1 || o.port > 65535 {
		return usagef("--port %d: must be 1-65535", o.port)
	}
	if o.out < 0 || o.out > localapi.MaxReleaseFor {
		return usagef("--for %v: must be between 0 and %v", o.out, localapi.MaxReleaseFor)
	}
	return nil
}

func (o *releaseOptions) run(ctx context.Context, kube kubernetes.Interface, flags *genericclioptions.ConfigFlags, deps Deps, ns, name string, out io.Writer) error {
	l, err := kube.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	st := Status(l, deps.Clock.Now())
	pod := o.pod
	if pod == "" {
		if st.Holder == "" {
			return fmt.Errorf("lease %s/%s is free: no holder to release (token %d)", ns, name, st.Token)
		}
		pod = st.Holder
	}
	p, err := kube.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("the holder's pod: %w", err)
	}
	if p.Status.Phase != corev1.PodRunning {
		return fmt.Errorf("pod %s/%s is %s, not Running: its sidecar cannot be reached", ns, pod, p.Status.Phase)
	}
	base, stop, err := deps.Forward(ctx, flags, ns, pod, o.port)
	if err != nil {
		return fmt.Errorf("port-forward to pod %s/%s port %d: %w", ns, pod, o.port, err)
	}
	defer stop()
	c, err := client.New(base, client.WithTimeout(releaseTimeout))
	if err != nil {
		return err
	}
	if err := c.Release(ctx, o.out); err != nil {
		return fmt.Errorf("POST /release to pod %s/%s: %w", ns, pod, err)
	}
	msg := fmt.Sprintf("lease %s/%s: pod %s released (the Lease was at token %d)", ns, name, pod, st.Token)
	if o.out > 0 {
		msg += fmt.Sprintf("; it stays out of the election for %v", o.out)
	}
	_, err = fmt.Fprintln(out, msg)
	return err
}
