package kubectlelector

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/kubernetes"

	"github.com/elector-sidecar/elector-sidecar/pkg/shards"
)

// runSet shows the shard set named name, if the namespace has one (found
// false otherwise, and nothing is printed).
func (o *statusOptions) runSet(ctx context.Context, client kubernetes.Interface, ns, name string, now time.Time, out io.Writer) (found bool, err error) {
	sel := labels.Set{shards.SetLabel: name}.AsSelector().String()
	list, err := client.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil || len(list.Items) == 0 {
		return false, err
	}
	leases := make([]*coordinationv1.Lease, len(list.Items))
	names := make([]string, len(list.Items))
	for i := range list.Items {
		leases[i], names[i] = &list.Items[i], list.Items[i].Name
	}
	sets := ShardSets(leases, now)
	if len(sets) != 1 {
		return false, nil
	}
	set := &sets[0]
	if o.events > 0 {
		if set.Events, err = setEvents(ctx, client, ns, names, o.events); err != nil {
			return true, fmt.Errorf("listing the Events of shard set %s/%s: %w", ns, name, err)
		}
	}
	switch o.out.format {
	case "", "wide":
		if err := PrintShardSets(out, sets, false, o.out.format == "wide"); err != nil {
			return true, err
		}
		if o.events > 0 {
			return true, printEvents(out, set.Events, now, true)
		}
		return true, nil
	case "name":
		return true, printLeaseNames(out, names)
	}
	return true, o.out.print(out, set, nil, false)
}

// printList prints a namespace's (or every namespace's) Leases: the single
// Leases as before, then the shard sets; names lists every Lease, the sets'
// too, for -o name.
func (o *statusOptions) printList(out io.Writer, items []LeaseStatus, sets []ShardSetStatus, names []string) error {
	if len(sets) == 0 {
		return o.print(out, &LeaseStatusList{TypeMeta: statusTypeMeta("LeaseStatusList"), Items: items}, items, false)
	}
	switch o.out.format {
	case "", "wide":
		if len(items) > 0 {
			if err := o.out.print(out, nil, items, o.allNamespaces); err != nil {
				return err
			}
			if _, err := fmt.Fprintln(out); err != nil {
				return err
			}
		}
		return PrintShardSets(out, sets, o.allNamespaces, o.out.format == "wide")
	case "name":
		return printLeaseNames(out, names)
	}
	return o.out.print(out, &LeaseStatusList{TypeMeta: statusTypeMeta("LeaseStatusList"), Items: items, ShardSets: sets}, items, o.allNamespaces)
}

func printLeaseNames(out io.Writer, names []string) error {
	sorted := append([]string(nil), names...)
	sort.Strings(sorted)
	for _, n := range sorted {
		if _, err := fmt.Fprintf(out, "lease.coordination.k8s.io/%s\n", n); err != nil {
			return err
		}
	}
	return nil
}

// PrintShardSets writes the SET table: a row per member of each set with the
// shards it holds and their tokens (in the same order), and a row "<none>
// free" for the shards nobody holds. A token given under an older session
// term of a member that is live again is marked "(old term)": it is not valid.
// wide adds the member's session Lease and its renew time.
func PrintShardSets(out io.Writer, sets []ShardSetStatus, allNamespaces, wide bool) error {
	w := printers.GetNewTabWriter(out)
	if allNamespaces {
		_, _ = fmt.Fprint(w, "NAMESPACE\t")
	}
	_, _ = fmt.Fprint(w, "SET\tMEMBER\tSTATE\tRENEWED\tEXPIRES IN\tSHARDS\tTOKENS")
	if wide {
		_, _ = fmt.Fprint(w, "\tSESSION LEASE\tRENEW TIME")
	}
	_, _ = fmt.Fprintln(w)
	for _, s := range sets {
		for _, m := range s.Members {
			if allNamespaces {
				fmt.Fprintf(w, "%s\t", s.Namespace)
			}
			// The member's row reads its session Lease as a Lease row does.
			ls := LeaseStatus{Holder: m.Identity, RenewTime: m.RenewTime, ExpiresInMs: m.ExpiresInMs, Expired: m.State == MemberExpired, ObservedAt: s.ObservedAt}
			if m.State == MemberLeft || m.State == MemberEnded || m.State == ShardsFree { // no term left to run out
				ls.ExpiresInMs = nil
			}
			idx, toks := shardColumns(m)
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s", s.Name, m.Identity, m.State, renewed(ls), expiresIn(ls), idx, toks)
			if wide {
				renewTime := "-"
				if m.RenewTime != nil {
					renewTime = m.RenewTime.UTC().Format(time.RFC3339Nano)
				}
				fmt.Fprintf(w, "\t%s\t%s", orNone(m.Lease), renewTime)
			}
			fmt.Fprintln(w)
		}
	}
	return w.Flush()
}

// shardColumns are the SHARDS and TOKENS cells: comma-separated, "-" if none.
func shardColumns(m ShardMember) (string, string) {
	if len(m.Shards) == 0 {
		return "-", "-"
	}
	idx := make([]string, len(m.Shards))
	toks := make([]string, len(m.Shards))
	for i, h := range m.Shards {
		idx[i] = strconv.Itoa(h.Index)
		toks[i] = strconv.FormatInt(h.Token, 10)
		if !h.Valid && m.State == MemberLive {
			toks[i] += "(old term)"
		}
	}
	return strings.Join(idx, ","), strings.Join(toks, ",")
}

// setEvents returns the last n Events on any of the set's Leases, oldest first.
func setEvents(ctx context.Context, client kubernetes.Interface, ns string, names []string, n int) ([]LeaseEvent, error) {
	set := map[string]bool{}
	for _, name := range names {
		set[name] = true
	}
	return eventsOn(ctx, client, ns, fields.Set{"involvedObject.kind": "Lease"}, set, true, n)
}
