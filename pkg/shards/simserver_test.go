package shards

// The shard simulator's API server: Leases by name, a resourceVersion
// counter, a fresh UID per create, compare-and-swap updates, preconditioned
// deletes, a log of every committed version on the global clock, and one
// watch queue per process (label-selected: the set's Leases) that the
// world delivers late, in order, or drops (then the process relists).
// Each process reaches it through its own client, so faults are per
// process: cut off (nothing applied), or a lost answer (applied or not).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/elector-sidecar/elector-sidecar/pkg/kubeclient"
)

var leasesGR = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

// simCommit is one committed version (lease nil: a deletion).
type simCommit struct {
	at     time.Duration
	name   string
	writer string
	lease  *coordinationv1.Lease
}

type simServer struct {
	w      *simWorld
	leases map[string]*coordinationv1.Lease
	rv     int64
	uids   int
	log    []simCommit
}

func (s *simServer) commit(name string, l *coordinationv1.Lease, writer string) *coordinationv1.Lease {
	if l == nil {
		delete(s.leases, name)
	} else {
		l = l.DeepCopy()
		s.rv++
		l.ResourceVersion = strconv.FormatInt(s.rv, 10)
		s.leases[name] = l
	}
	s.log = append(s.log, simCommit{at: s.w.now, name: name, writer: writer, lease: l})
	s.w.chk.commit(name, l, writer)
	prev := s.w.lastCommitted[name]
	s.w.lastCommitted[name] = l
	for _, p := range s.w.procs {
		p.enqueue(prev, l)
	}
	return l
}

func (s *simServer) create(l *coordinationv1.Lease, writer string) (*coordinationv1.Lease, error) {
	if s.leases[l.Name] != nil {
		return nil, apierrors.NewAlreadyExists(leasesGR, l.Name)
	}
	l = l.DeepCopy()
	s.uids++
	l.UID = types.UID("uid-" + strconv.Itoa(s.uids))
	return s.commit(l.Name, l, writer).DeepCopy(), nil
}

func (s *simServer) update(l *coordinationv1.Lease, writer string) (*coordinationv1.Lease, error) {
	cur := s.leases[l.Name]
	if cur == nil {
		return nil, apierrors.NewNotFound(leasesGR, l.Name)
	}
	if l.ResourceVersion != cur.ResourceVersion || (l.UID != "" && l.UID != cur.UID) {
		return nil, apierrors.NewConflict(leasesGR, l.Name, errors.New("the object has been modified"))
	}
	l = l.DeepCopy()
	l.UID = cur.UID
	return s.commit(l.Name, l, writer).DeepCopy(), nil
}

func (s *simServer) delete(name string, pre *metav1.Preconditions, writer string) error {
	cur := s.leases[name]
	if cur == nil {
		return apierrors.NewNotFound(leasesGR, name)
	}
	if pre != nil && ((pre.UID != nil && *pre.UID != cur.UID) || (pre.ResourceVersion != nil && *pre.ResourceVersion != cur.ResourceVersion)) {
		return apierrors.NewConflict(leasesGR, name, errors.New("precondition failed"))
	}
	s.commit(name, nil, writer)
	return nil
}

// list is the set's Leases, by name.
func (s *simServer) list() []*coordinationv1.Lease {
	var out []*coordinationv1.Lease
	for _, name := range slices.Sorted(mapKeys(s.leases)) {
		out = append(out, s.leases[name].DeepCopy())
	}
	return out
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// simClient is one process's client: its calls go through its faults.
type simClient struct{ p *simProc }

func (c simClient) Leases(string) kubeclient.LeaseInterface { return c }
func (c simClient) Pods(string) kubeclient.PodInterface     { return nil }

// call runs a write through the process's faults: cut off (an error,
// nothing applied), or with a lost answer (applied or not, drawn).
func (c simClient) call(what string, apply func() (*coordinationv1.Lease, error)) (*coordinationv1.Lease, error) {
	p := c.p
	w := p.w
	if p.cut > w.now {
		w.tracef(p, "%s: cut off", what)
		return nil, errors.New("simulated: connection refused")
	}
	if w.fault("lost-answer") {
		if w.faultRand.IntN(2) == 0 {
			_, err := apply()
			w.tracef(p, "%s: applied (%v), answer lost", what, errWord(err))
		} else {
			w.tracef(p, "%s: not applied, answer lost", what)
		}
		return nil, context.DeadlineExceeded
	}
	l, err := apply()
	w.tracef(p, "%s: %v", what, errWord(err))
	return l, err
}

func errWord(err error) string {
	switch {
	case err == nil:
		return "ok"
	case apierrors.IsConflict(err):
		return "conflict"
	case apierrors.IsNotFound(err):
		return "not found"
	case apierrors.IsAlreadyExists(err):
		return "exists"
	}
	return err.Error()
}

func (c simClient) Get(_ context.Context, name string, _ metav1.GetOptions) (*coordinationv1.Lease, error) {
	if c.p.cut > c.p.w.now {
		return nil, errors.New("simulated: connection refused")
	}
	if l := c.p.w.srv.leases[name]; l != nil {
		return l.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(leasesGR, name)
}

// describe is a written Lease in the trace: holder, count, session term.
func describe(l *coordinationv1.Lease) string {
	if l == nil {
		return "absent"
	}
	ref, _ := sessionOf(l)
	return fmt.Sprintf("%s holder=%q count=%d term=%s/%d rv=%s", l.Name, holderOf(l), transitionsOf(l), ref.UID, ref.Term, l.ResourceVersion)
}

func (c simClient) Create(_ context.Context, l *coordinationv1.Lease, _ metav1.CreateOptions) (*coordinationv1.Lease, error) {
	return c.call("create "+describe(l), func() (*coordinationv1.Lease, error) { return c.p.w.srv.create(l, c.p.name) })
}

func (c simClient) Update(_ context.Context, l *coordinationv1.Lease, _ metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	return c.call("update "+describe(l), func() (*coordinationv1.Lease, error) { return c.p.w.srv.update(l, c.p.name) })
}

func (c simClient) Delete(_ context.Context, name string, opts metav1.DeleteOptions) error {
	_, err := c.call("delete "+name, func() (*coordinationv1.Lease, error) {
		return nil, c.p.w.srv.delete(name, opts.Preconditions, c.p.name)
	})
	return err
}

// List is the confirming list of the shard Leases (confirm.go); the
// watch's lists the simulator delivers itself.
func (c simClient) List(context.Context, metav1.ListOptions) (*coordinationv1.LeaseList, error) {
	if c.p.cut > c.p.w.now || c.p.noList {
		return nil, errors.New("simulated: connection refused")
	}
	out := &coordinationv1.LeaseList{}
	for _, l := range c.p.w.srv.list() {
		if l.Labels[RoleLabel] == RoleShard {
			out.Items = append(out.Items, *l)
		}
	}
	return out, nil
}

func (c simClient) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	panic("the simulator delivers watch events itself")
}

func (c simClient) Patch(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (*coordinationv1.Lease, error) {
	panic("a shard set never patches")
}
