package kubectlelector

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/kubernetes"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
)

// DefaultEvents is how many of the last Events `status LEASE` shows.
const DefaultEvents = 10

type statusOptions struct {
	allNamespaces bool
	allLeases     bool
	selector      string
	output        string
	events        int
	out           output
}

func newStatusCommand(streams genericiooptions.IOStreams, flags *genericclioptions.ConfigFlags, deps Deps) *cobra.Command {
	o := &statusOptions{}
	c := &cobra.Command{
		Use:   "status [LEASE|SET] [-n NAMESPACE | -A [--all-leases]] [-l SELECTOR] [-o json|yaml|wide|name|jsonpath=TEMPLATE]",
		Short: "Show the holder, fencing token and expiry of Leases",
		Long: `Show the election on Leases: LEASE, HOLDER, TOKEN (spec.leaseTransitions, the holder's
fencing token), RENEWED (since spec.renewTime), DURATION (spec.leaseDurationSeconds) and
EXPIRES IN (renewTime + duration - now: "expired" when past, "-" when the Lease is free).
RENEWED and EXPIRES IN use this machine's clock and the holder's renewTime.

Without LEASE it lists every Lease of the namespace, other controllers' too. With -A it
lists, across all namespaces, only the Leases elector-sidecar writes (those carrying its
elector-sidecar.io/incarnation annotation; node heartbeats and other controllers' Leases
are left out); --all-leases lists every Lease. -l filters by the Leases' labels (the chart
labels its Lease app.kubernetes.io/instance=RELEASE), on the API server.
With LEASE it also shows the last Events on that Lease (involvedObject.kind=Lease), oldest
first: elector-sidecar records one for every leadership change.

-o json|yaml prints a LeaseStatus (one LEASE) or LeaseStatusList object of apiVersion
elector-sidecar.io/v1alpha1 with the same fields, times as RFC 3339 and durations in ms;
-o jsonpath=TEMPLATE applies kubectl's JSONPath to that object; -o wide adds the absolute
renew time and the UID; -o name prints lease.coordination.k8s.io/NAME per Lease.

The Leases of a shard set (elector-sidecar --shards=N: labelled
elector-sidecar.io/shard-set=SET) are shown as one set, after the other Leases: a row
per member (its session Lease: live, expired, ended by another member, or left) with
the shards it holds and their tokens, and a row "<none> free" for the shards nobody
holds; a token given under an older session term of a member that is live again is
marked "(old term)". "status SET" shows one set and the Events on its Leases. In -o
json|yaml the sets are the list's shardSets (kind ShardSetStatus for "status SET").`,
		Example: `  kubectl elector status -n team
  kubectl elector status nightly-run -n team
  kubectl elector status -A
  kubectl elector status -n team -l app.kubernetes.io/instance=billing
  kubectl elector status nightly-run -n team -o json
  kubectl elector status nightly-run -n team -o jsonpath='{.holder} {.token}'
  kubectl elector status orders -n team    # a shard set`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) > 1 {
				return fmt.Errorf("at most one LEASE, got %d arguments", len(args))
			}
			return nil
		},
		ValidArgsFunction: completeLeases(flags, deps),
		RunE: func(c *cobra.Command, args []string) error {
			if err := o.validate(args); err != nil {
				return err
			}
			client, ns, err := clientAndNamespace(flags, deps)
			if err != nil {
				return runError{err}
			}
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			if err := o.run(c.Context(), client, ns, name, deps.Clock.Now(), streams.Out); err != nil {
				return runError{err}
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "list elector-sidecar's Leases of every namespace")
	c.Flags().BoolVar(&o.allLeases, "all-leases", false, "with -A: list every Lease, not only those elector-sidecar writes")
	c.Flags().StringVarP(&o.selector, "selector", "l", "", "label selector of the Leases to list (e.g. app.kubernetes.io/instance=billing)")
	c.Flags().StringVarP(&o.output, "output", "o", "", "output format: "+outputFormats+" (default: a table)")
	c.Flags().IntVar(&o.events, "events", DefaultEvents, "how many of the last Events to show with one LEASE (0: none)")
	return c
}

func (o *statusOptions) validate(args []string) error {
	out, err := parseOutput(o.output)
	if err != nil {
		return err
	}
	o.out = out
	if _, err := labels.Parse(o.selector); err != nil {
		return usagef("--selector %q: %v", o.selector, err)
	}
	if o.selector != "" && len(args) == 1 {
		return usagef("a LEASE name cannot be combined with --selector")
	}
	if o.allLeases && !o.allNamespaces {
		return usagef("--all-leases only widens --all-namespaces (-A); a namespace's list has every Lease already")
	}
	if o.events < 0 {
		return usagef("--events %d: must be 0 or more", o.events)
	}
	if o.allNamespaces && len(args) == 1 {
		return usagef("a LEASE name cannot be combined with --all-namespaces")
	}
	return nil
}

func (o *statusOptions) run(ctx context.Context, client kubernetes.Interface, ns, name string, now time.Time, out io.Writer) error {
	if name != "" {
		l, err := client.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) { // no such Lease: a shard set of that name?
			if found, serr := o.runSet(ctx, client, ns, name, now, out); found || serr != nil {
				return serr
			}
		}
		if err != nil {
			return err
		}
		st := Status(l, now)
		if o.events > 0 {
			if st.Events, err = leaseEvents(ctx, client, ns, name, o.events); err != nil {
				return fmt.Errorf("listing the Events of lease %s/%s: %w", ns, name, err)
			}
		}
		return o.print(out, &st, []LeaseStatus{st}, true)
	}
	if o.allNamespaces {
		ns = metav1.NamespaceAll
	}
	list, err := client.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: o.selector})
	if err != nil {
		return err
	}
	items := make([]LeaseStatus, 0, len(list.Items))
	var setLeases []*coordinationv1.Lease // shown grouped by set (shardset.go)
	var names []string
	for i := range list.Items {
		l := &list.Items[i]
		if _, ok := inSet(l); ok {
			setLeases, names = append(setLeases, l), append(names, l.Name)
			continue
		}
		if o.allNamespaces && !o.allLeases && !WrittenBySidecar(l) {
			continue
		}
		items, names = append(items, Status(l, now)), append(names, l.Name)
	}
	sets := ShardSets(setLeases, now)
	sort.Slice(items, func(i, j int) bool {
		if items[i].Namespace != items[j].Namespace {
			return items[i].Namespace < items[j].Namespace
		}
		return items[i].Name < items[j].Name
	})
	if o.out.table() && len(items) == 0 && len(sets) == 0 {
		if o.allNamespaces {
			_, err = fmt.Fprintln(out, "No leases found")
		} else {
			_, err = fmt.Fprintf(out, "No leases found in %s namespace.\n", ns)
		}
		return err
	}
	return o.printList(out, items, sets, names)
}

func (o *statusOptions) print(out io.Writer, obj runtime.Object, items []LeaseStatus, one bool) error {
	if err := o.out.print(out, obj, items, o.allNamespaces); err != nil {
		return err
	}
	if one && o.out.table() && o.events > 0 {
		return PrintEvents(out, items[0].Events, items[0].ObservedAt.Time)
	}
	return nil
}

// WrittenBySidecar reports whether elector-sidecar has written l: every acquire and renew marks the Lease
// with the writing process (election.IncarnationAnnotation), and nothing removes the mark.
func WrittenBySidecar(l *coordinationv1.Lease) bool {
	_, ok := l.Annotations[election.IncarnationAnnotation]
	return ok
}

// Status computes a Lease's row at now.
func Status(l *coordinationv1.Lease, now time.Time) LeaseStatus {
	st := LeaseStatus{
		TypeMeta:             statusTypeMeta("LeaseStatus"),
		Namespace:            l.Namespace,
		Name:                 l.Name,
		UID:                  string(l.UID),
		LeaseDurationSeconds: l.Spec.LeaseDurationSeconds,
		ObservedAt:           metav1.NewMicroTime(now),
	}
	if l.Spec.HolderIdentity != nil {
		st.Holder = *l.Spec.HolderIdentity
	}
	if l.Spec.LeaseTransitions != nil {
		st.Token = int64(*l.Spec.LeaseTransitions)
	}
	if l.Spec.RenewTime != nil {
		rt := *l.Spec.RenewTime
		st.RenewTime = &rt
		ago := max(now.Sub(rt.Time), 0).Milliseconds()
		st.RenewedAgoMs = &ago
		if st.Holder != "" && l.Spec.LeaseDurationSeconds != nil {
			left := rt.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second).Sub(now)
			ms := max(left, 0).Milliseconds()
			st.ExpiresInMs = &ms
			st.Expired = left <= 0
		}
	}
	return st
}

// PrintTable writes the LEASE table (NAMESPACE first with allNamespaces).
func PrintTable(out io.Writer, items []LeaseStatus, allNamespaces bool) error {
	w := printers.GetNewTabWriter(out)
	if allNamespaces {
		_, _ = fmt.Fprint(w, "NAMESPACE\t")
	}
	_, _ = fmt.Fprintln(w, "LEASE\tHOLDER\tTOKEN\tRENEWED\tDURATION\tEXPIRES IN")
	for _, s := range items {
		if allNamespaces {
			fmt.Fprintf(w, "%s\t", s.Namespace)
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\n", s.Name, orNone(s.Holder), s.Token, renewed(s), leaseDuration(s), expiresIn(s))
	}
	return w.Flush()
}

// PrintEvents writes the "Events:" section of `status LEASE`.
func PrintEvents(out io.Writer, events []LeaseEvent, now time.Time) error {
	return printEvents(out, events, now, false)
}

// printEvents writes an "Events:" section; withLease adds the LEASE each
// Event is on (`status SET`).
func printEvents(out io.Writer, events []LeaseEvent, now time.Time, withLease bool) error {
	if len(events) == 0 {
		_, err := fmt.Fprintln(out, "\nEvents: <none>")
		return err
	}
	fmt.Fprintln(out, "\nEvents:")
	w := printers.GetNewTabWriter(out)
	lease := func(s string) string { return s }
	if !withLease {
		lease = func(string) string { return "" }
	}
	fmt.Fprintln(w, "  TIME\tTYPE\tREASON\t"+lease("LEASE\t")+"FROM\tMESSAGE")
	for _, e := range events {
		when := ago(now.Sub(e.Time.Time))
		if e.Count > 1 {
			when += " (x" + strconv.Itoa(int(e.Count)) + ")"
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s%s\t%s\n", when, e.Type, e.Reason, lease(e.Lease+"\t"), orNone(e.Source), e.Message)
	}
	return w.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func ago(d time.Duration) string { return duration.HumanDuration(max(d, 0)) + " ago" }

func renewed(s LeaseStatus) string {
	if s.RenewTime == nil {
		return "-"
	}
	return ago(s.ObservedAt.Sub(s.RenewTime.Time))
}

func leaseDuration(s LeaseStatus) string {
	if s.LeaseDurationSeconds == nil {
		return "-"
	}
	return duration.HumanDuration(time.Duration(*s.LeaseDurationSeconds) * time.Second)
}

func expiresIn(s LeaseStatus) string {
	switch {
	case s.ExpiresInMs == nil:
		return "-"
	case s.Expired:
		return "expired"
	}
	return duration.HumanDuration(time.Duration(*s.ExpiresInMs) * time.Millisecond)
}

// leaseEvents returns the last n Events on the Lease, oldest first.
func leaseEvents(ctx context.Context, client kubernetes.Interface, ns, name string, n int) ([]LeaseEvent, error) {
	sel := fields.Set{"involvedObject.kind": "Lease", "involvedObject.name": name}
	return eventsOn(ctx, client, ns, sel, map[string]bool{name: true}, false, n)
}

// eventsOn returns the last n Events (listed with the field selector sel) on
// the Leases named in names, oldest first, each naming its Lease if withLease.
func eventsOn(ctx context.Context, client kubernetes.Interface, ns string, sel fields.Set, names map[string]bool, withLease bool, n int) ([]LeaseEvent, error) {
	list, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel.AsSelector().String()})
	if err != nil {
		return nil, err
	}
	var out []LeaseEvent
	for i := range list.Items {
		e := &list.Items[i]
		if e.InvolvedObject.Kind != "Lease" || !names[e.InvolvedObject.Name] {
			continue // the selector is the API server's job; this keeps its meaning everywhere
		}
		out = append(out, LeaseEvent{
			Time:    eventTime(e),
			Type:    e.Type,
			Reason:  e.Reason,
			Source:  eventSource(e),
			Message: e.Message,
			Count:   e.Count,
		})
		if withLease {
			out[len(out)-1].Lease = e.InvolvedObject.Name
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(&out[j].Time) })
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out, nil
}

// eventTime is when the Event last happened.
func eventTime(e *corev1.Event) metav1.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp
	case !e.EventTime.IsZero():
		return metav1.NewTime(e.EventTime.Time)
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp
	}
	return e.CreationTimestamp
}

// eventSource is the recording host (elector-sidecar records its identity).
func eventSource(e *corev1.Event) string {
	switch {
	case e.Source.Host != "":
		return e.Source.Host
	case e.ReportingInstance != "":
		return e.ReportingInstance
	}
	return e.Source.Component
}
