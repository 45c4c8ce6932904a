package election

// The simulator's API server: a small store of Leases by name with a
// resourceVersion counter, a fresh UID per create, compare-and-swap on
// updates, its own log of every committed version, and one watch event
// queue per process that the scheduler delivers (simworld_test.go). Each
// process reaches it through its own client (simClient), so that each
// process's calls can be faulted separately. Not fake.Clientset: its
// tracker applies updates without a resourceVersion precondition and its
// watchers panic when they fill up.

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/elector-sidecar/elector-sidecar/pkg/kubeclient"
)

const simAdversary = "adversary"

// simCommit is one entry of the server's log: a committed version (or a
// deletion) with who wrote it and when, on the global clock.
type simCommit struct {
	rv          int64
	uid         string
	holder      string
	transitions int64
	writer      string // process name, or simAdversary
	verb        string // create, update, delete, backup
	at          time.Duration
	lease       *coordinationv1.Lease // the version (nil: a deletion)
}

// simEvent is a watch event queued for one process.
type simEvent struct {
	at      time.Duration // delivery time (global)
	deleted bool
	lease   *coordinationv1.Lease
}

// simPending is a write whose answer was lost and that the server applies
// later (it was still in flight).
type simPending struct {
	at     time.Duration
	writer *simProc
	create bool
	lease  *coordinationv1.Lease
}

type simServer struct {
	w       *simWorld
	leases  map[string]*coordinationv1.Lease // by name; never iterated
	rv      int64
	uids    int
	log     []simCommit
	pending []simPending
}

var errSimTimeout = context.DeadlineExceeded

func (s *simServer) stored(name string) *coordinationv1.Lease { return s.leases[name] }

// commit stores l (nil: deletes name), logs it and queues its event for
// every watching process.
func (s *simServer) commit(name string, l *coordinationv1.Lease, writer, verb string, keepRV bool) *coordinationv1.Lease {
	prev := s.leases[name]
	c := simCommit{writer: writer, verb: verb, at: s.w.now}
	if l == nil {
		delete(s.leases, name)
		c.rv, c.uid = s.rv, uidOf(prev)
	} else {
		l = l.DeepCopy()
		if !keepRV {
			s.rv++
			l.ResourceVersion = strconv.FormatInt(s.rv, 10)
		}
		s.leases[name] = l
		c.rv, _ = strconv.ParseInt(l.ResourceVersion, 10, 64)
		c.uid, c.holder, c.transitions, c.lease = uidOf(l), holderOf(l), transitionsOf(l), l
	}
	s.log = append(s.log, c)
	s.w.chk.commit(c)
	s.w.fanOut(prev, l)
	return l
}

func (s *simServer) create(p *simProc, l *coordinationv1.Lease, writer string) (*coordinationv1.Lease, error) {
	if s.leases[l.Name] != nil {
		return nil, apierrors.NewAlreadyExists(leaseGVR.GroupResource(), l.Name)
	}
	l = l.DeepCopy()
	s.uids++
	l.UID = types.UID("uid-" + strconv.Itoa(s.uids))
	l.CreationTimestamp = metav1.NewTime(simEpoch.Add(s.w.now))
	_ = p
	return s.commit(l.Name, l, writer, "create", false).DeepCopy(), nil
}

func (s *simServer) update(l *coordinationv1.Lease, writer string) (*coordinationv1.Lease, error) {
	cur := s.leases[l.Name]
	if cur == nil {
		return nil, apierrors.NewNotFound(leaseGVR.GroupResource(), l.Name)
	}
	if l.ResourceVersion != cur.ResourceVersion || (l.UID != "" && l.UID != cur.UID) {
		return nil, apierrors.NewConflict(leaseGVR.GroupResource(), l.Name,
			errors.New("the object has been modified; please apply your changes to the latest version and try again"))
	}
	l = l.DeepCopy()
	l.UID, l.CreationTimestamp = cur.UID, cur.CreationTimestamp
	return s.commit(l.Name, l, writer, "update", false).DeepCopy(), nil
}

// applyPending applies the in-flight writes that are due (compare-and-swap
// at that moment, as etcd would).
func (s *simServer) applyPending() {
	keep := s.pending[:0]
	var due []simPending
	for _, p := range s.pending {
		if p.at <= s.w.now {
			due = append(due, p)
		} else {
			keep = append(keep, p)
		}
	}
	s.pending = keep
	for _, p := range due {
		var err error
		what := "late-update"
		if p.create {
			what = "late-create"
			_, err = s.create(p.writer, p.lease, p.writer.name)
		} else {
			_, err = s.update(p.lease, p.writer.name)
		}
		s.w.tracef(p.writer, what, "%s", errWord(err))
	}
}

// simClient is one process's kubeclient.Interface: its calls go to the
// server through that process's faults.
type simClient struct{ p *simProc }

func (c simClient) Leases(string) kubeclient.LeaseInterface { return c }
func (c simClient) Pods(string) kubeclient.PodInterface     { return nil }

// Delete is not a call the election makes (shards end sessions with it).
func (c simClient) Delete(context.Context, string, metav1.DeleteOptions) error {
	panic("the election never deletes a Lease")
}

func (c simClient) Get(_ context.Context, name string, _ metav1.GetOptions) (*coordinationv1.Lease, error) {
	w := c.p.w
	if w.now < w.outage {
		c.p.call("get:down")
		return nil, apierrors.NewServiceUnavailable("simulated outage")
	}
	if w.faultOn(fReadError) && w.api.Float64() < w.readErrP {
		c.p.call("get:err")
		if w.api.IntN(2) == 0 {
			return nil, errSimTimeout
		}
		return nil, apierrors.NewServiceUnavailable("simulated")
	}
	l := w.srv.stored(name)
	if l == nil {
		c.p.call("get:404")
		return nil, apierrors.NewNotFound(leaseGVR.GroupResource(), name)
	}
	c.p.call("get")
	return l.DeepCopy(), nil
}

func (c simClient) Create(_ context.Context, l *coordinationv1.Lease, _ metav1.CreateOptions) (*coordinationv1.Lease, error) {
	return c.write(l, true)
}

func (c simClient) Update(_ context.Context, l *coordinationv1.Lease, _ metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	return c.write(l, false)
}

// write carries out a create or update through the lost-answer fault:
// applied with the answer lost (a timeout, never an API status), not
// applied (a timeout or a 503), or applied later while the caller has
// already given up on it.
func (c simClient) write(l *coordinationv1.Lease, create bool) (*coordinationv1.Lease, error) {
	w, p := c.p.w, c.p
	verb := "upd"
	if create {
		verb = "create"
	}
	do := func() (*coordinationv1.Lease, error) {
		if create {
			return w.srv.create(p, l, p.name)
		}
		return w.srv.update(l, p.name)
	}
	if w.now < w.outage {
		p.call(verb + ":down")
		return nil, apierrors.NewServiceUnavailable("simulated outage")
	}
	if w.faultOn(fLostAnswer) && w.api.Float64() < w.lostP {
		switch w.api.IntN(4) {
		case 0:
			_, err := do()
			p.call(verb + ":lost(" + errWord(err) + ")")
			return nil, errSimTimeout
		case 1:
			p.call(verb + ":timeout")
			return nil, errSimTimeout
		case 2:
			p.call(verb + ":503")
			return nil, apierrors.NewServiceUnavailable("simulated")
		default:
			at := w.now + time.Duration(w.api.Int64N(int64(p.cfg.rd)))
			w.srv.pending = append(w.srv.pending, simPending{at: at, writer: p, create: create, lease: l.DeepCopy()})
			p.call(verb + ":inflight")
			return nil, errSimTimeout
		}
	}
	got, err := do()
	p.call(verb + ":" + errWord(err))
	return got, err
}

// Patch applies a JSON merge patch of metadata.annotations (an
// announcement, handoff.go), with metadata.uid as a precondition, through
// the lost-answer fault (applied with the answer lost, or not applied).
func (c simClient) Patch(_ context.Context, name string, _ types.PatchType, data []byte, _ metav1.PatchOptions, _ ...string) (*coordinationv1.Lease, error) {
	w, p := c.p.w, c.p
	if w.now < w.outage {
		p.call("patch:down")
		return nil, apierrors.NewServiceUnavailable("simulated outage")
	}
	do := func() (*coordinationv1.Lease, error) { return w.srv.patch(name, data, p.name) }
	if w.faultOn(fLostAnswer) && w.api.Float64() < w.lostP {
		if w.api.IntN(2) == 0 {
			_, err := do()
			p.call("patch:lost(" + errWord(err) + ")")
		} else {
			p.call("patch:timeout")
		}
		return nil, errSimTimeout
	}
	got, err := do()
	p.call("patch:" + errWord(err))
	return got, err
}

func (s *simServer) patch(name string, data []byte, writer string) (*coordinationv1.Lease, error) {
	cur := s.leases[name]
	if cur == nil {
		return nil, apierrors.NewNotFound(leaseGVR.GroupResource(), name)
	}
	l, err := mergeAnnotations(cur, data)
	if err != nil {
		return nil, err
	}
	return s.commit(name, l, writer, "patch", false).DeepCopy(), nil
}

// mergeAnnotations applies the election's merge patch (metadata.uid as a
// precondition, metadata.annotations) to a copy of cur, as the API server
// does for these two fields.
func mergeAnnotations(cur *coordinationv1.Lease, data []byte) (*coordinationv1.Lease, error) {
	var mp struct {
		Metadata struct {
			UID         types.UID          `json:"uid"`
			Annotations map[string]*string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(data, &mp); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if mp.Metadata.UID != "" && mp.Metadata.UID != cur.UID {
		return nil, apierrors.NewConflict(leaseGVR.GroupResource(), cur.Name, errors.New("uid precondition"))
	}
	l := cur.DeepCopy()
	for k, v := range mp.Metadata.Annotations {
		if v == nil {
			delete(l.Annotations, k)
		} else {
			setAnnotation(l, k, *v)
		}
	}
	return l, nil
}

func (c simClient) List(_ context.Context, _ metav1.ListOptions) (*coordinationv1.LeaseList, error) {
	return c.p.w.srv.list(), nil
}

func (c simClient) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return nil, errors.New("the simulator delivers watch events itself")
}

func (s *simServer) list() *coordinationv1.LeaseList {
	out := &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(s.rv, 10)}}
	if l := s.leases[leaseName]; l != nil {
		out.Items = append(out.Items, *l.DeepCopy())
	}
	return out
}

func errWord(err error) string {
	switch {
	case err == nil:
		return "ok"
	case apierrors.IsConflict(err):
		return "409"
	case apierrors.IsAlreadyExists(err):
		return "exists"
	case apierrors.IsNotFound(err):
		return "404"
	default:
		return "err"
	}
}
