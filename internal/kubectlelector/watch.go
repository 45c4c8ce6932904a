package kubectlelector

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/clock"
)

// WatchTimeFormat is the time at the start of every `watch` line.
const WatchTimeFormat = "2006-01-02T15:04:05.000Z07:00"

func newWatchCommand(streams genericiooptions.IOStreams, flags *genericclioptions.ConfigFlags, deps Deps) *cobra.Command {
	return &cobra.Command{
		Use:   "watch LEASE [-n NAMESPACE]",
		Short: "Print a line for every leadership change of a Lease, until Ctrl-C",
		Long: `Print a line for every leadership change of a Lease, until Ctrl-C (exit 0):

  2025-06-01T12:00:03.114+02:00  holder=pod-a  token=7
  2025-06-01T12:00:41.502+02:00  holder=<none>  token=7     (released)
  2025-06-01T12:00:41.530+02:00  holder=pod-b  token=8

The first line is the Lease as it is when the watch starts. A line is printed when the
holder or the token (spec.leaseTransitions) changes, not for renewals; the time is when
this machine saw the change. A deleted Lease prints "lease deleted", a missing one
"lease not found" (the watch goes on and shows it when it is created). It uses an
informer: after a dropped watch or an expired resourceVersion it lists again, and
prints only what changed meanwhile.`,
		Example: `  kubectl elector watch nightly-run -n team`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("watch needs exactly one LEASE, got %d arguments", len(args))
			}
			return nil
		},
		ValidArgsFunction: completeLeases(flags, deps),
		RunE: func(c *cobra.Command, args []string) error {
			client, ns, err := clientAndNamespace(flags, deps)
			if err != nil {
				return runError{err}
			}
			if err := Watch(c.Context(), client, ns, args[0], deps.Clock, streams.Out); err != nil {
				return runError{err}
			}
			return nil
		},
	}
}

// leaderState is what a watch line shows.
type leaderState struct {
	exists bool
	holder string
	token  int64
}

func stateOf(l *coordinationv1.Lease) leaderState {
	st := leaderState{exists: true}
	if l.Spec.HolderIdentity != nil {
		st.holder = *l.Spec.HolderIdentity
	}
	if l.Spec.LeaseTransitions != nil {
		st.token = int64(*l.Spec.LeaseTransitions)
	}
	return st
}

// line renders the change from prev (nil: the first line) to s.
func (s leaderState) line(prev *leaderState, now time.Time) string {
	ts := now.Format(WatchTimeFormat)
	switch {
	case !s.exists && prev == nil:
		return ts + "  lease not found"
	case !s.exists:
		return ts + "  lease deleted"
	}
	l := fmt.Sprintf("%s  holder=%s  token=%d", ts, orNone(s.holder), s.token)
	if s.holder == "" && prev != nil && prev.exists && prev.holder != "" {
		l += "  (released)"
	}
	return l
}

// Watch prints one line per leadership change of the Lease ns/name to out
// until ctx is done (then it returns nil). It fails at once if the Lease
// cannot be listed (no access, no server); later errors make it list again.
func Watch(ctx context.Context, client kubernetes.Interface, ns, name string, clk clock.PassiveClock, out io.Writer) error {
	leases := client.CoordinationV1().Leases(ns)
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	// One plain list first: a Forbidden or unreachable server is an error
	// here, not an informer retrying in the background forever.
	if _, err := leases.List(ctx, metav1.ListOptions{FieldSelector: selector, Limit: 1}); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return leases.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return leases.Watch(ctx, o)
		},
	}
	var last *leaderState
	emit := func(s leaderState) error {
		if last != nil && *last == s {
			return nil // a renewal, or the same state after a re-list
		}
		_, err := fmt.Fprintln(out, s.line(last, clk.Now()))
		last = &s
		return err
	}
	precondition := func(store cache.Store) (bool, error) {
		obj, found, err := store.GetByKey(cache.NewObjectName(ns, name).String())
		if err != nil {
			return false, err
		}
		if !found {
			return false, emit(leaderState{})
		}
		l, ok := obj.(*coordinationv1.Lease)
		if !ok {
			return false, fmt.Errorf("unexpected object %T in the lease store", obj)
		}
		return false, emit(stateOf(l))
	}
	condition := func(ev watch.Event) (bool, error) {
		l, ok := ev.Object.(*coordinationv1.Lease)
		if !ok || l.Name != name {
			return false, nil
		}
		if ev.Type == watch.Deleted {
			return false, emit(leaderState{})
		}
		return false, emit(stateOf(l))
	}
	// The wrapper tells the reflector whether client can stream the initial
	// list (WatchList); a fake clientset cannot.
	_, err := watchtools.UntilWithSync(ctx, cache.ToListWatcherWithWatchListSemantics(lw, client), &coordinationv1.Lease{}, precondition, condition)
	if ctx.Err() != nil {
		return nil // Ctrl-C
	}
	return err
}
