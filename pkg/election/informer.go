package election

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// observation is one informer event, queued for the loop in order.
type observation struct {
	lease   *coordinationv1.Lease // the Lease; for a deletion, its last known state (may be nil)
	deleted bool
	// unknown: a deletion found by a relist; lease is the last version
	// this process knew, not necessarily the one deleted.
	unknown bool
	synced  bool // marker: the initial list has been handed to the loop
}

// startInformer watches the one Lease (a field selector on its name) and
// queues every event for the loop. A bare reflector (list, then watch from
// the list's resourceVersion, relisting after a gap) writes straight into
// leaseStore, which queues what it is given: no DeltaFIFO, indexer or
// handler goroutines between the watch and the loop. Every follower wakes
// on every Lease event, and with many candidates on one machine those
// goroutine hand-offs were a large part of a follower's CPU per event (see
// docs/benchmarks.md, Scale). When the initial list has been queued, a
// marker follows it through the same queue, so the loop never sees the
// marker before (or instead of) the events it covers.
func (e *Elector) startInformer(ctx context.Context) error {
	name := "lease " + e.cfg.LeaseKey()
	r := cache.NewReflectorWithOptions(e.listWatch(), &coordinationv1.Lease{}, e.store, cache.ReflectorOptions{Name: name, TypeDescription: "*v1.Lease"})
	go r.RunWithContext(ctx)
	return nil
}

// WatchStore is the store a reflector feeds with this candidate's Lease
// when Config.ExternalWatch is set: it may be given every Lease of a
// shared watch (it keeps only its own), and a relist's Replace must list
// them all. Events given before Run are kept for it.
func (e *Elector) WatchStore() cache.ReflectorStore { return e.store }

func (e *Elector) listWatch() cache.ListerWatcher {
	selector := "metadata.name=" + e.cfg.Name
	warn := newAPIWarnings(e.log, e.clock, e.cfg.LeaseDuration) // warnlog.go
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			l, err := e.leases.List(ctx, opts)
			if err != nil {
				e.metrics.apiError("list")
				warn.failed("list", err)
			}
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			w, err := e.leases.Watch(ctx, opts)
			if err != nil {
				e.metrics.apiError("watch")
				warn.failed("watch", err)
			}
			return w, err
		},
	}
	// Lets the reflector skip streaming lists with clients that lack them
	// (the fake clientset in unit tests, through kubeclient/clientset.Wrap).
	return cache.ToListWatcherWithWatchListSemantics(lw, e.cfg.Client)
}

// leaseStore is the reflector's store: it keeps nothing but the last
// version it queued (a relist that no longer finds the Lease queues its
// deletion with that version, as an informer's DeletedFinalStateUnknown)
// and hands every change to the loop. The reflector calls it from one
// goroutine.
type leaseStore struct {
	e      *Elector
	last   *coordinationv1.Lease // nil: none known
	synced bool
}

func (s *leaseStore) Add(obj any) error    { return s.Update(obj) }
func (s *leaseStore) Resync() error        { return nil }
func (s *leaseStore) Update(obj any) error { s.put(obj, false); return nil }
func (s *leaseStore) Delete(obj any) error { s.put(obj, true); return nil }

// Replace is a (re)list: the Lease as it now is, or its deletion if the
// list no longer has the one we knew. The first one completes the initial
// sync.
func (s *leaseStore) Replace(list []any, _ string) error {
	found := false
	for _, obj := range list {
		if l, ok := obj.(*coordinationv1.Lease); ok && s.e.watched(l) {
			s.put(l, false)
			found = true
		}
	}
	if !found && s.last != nil {
		s.put(cache.DeletedFinalStateUnknown{Key: s.e.cfg.LeaseKey(), Obj: s.last}, true)
	}
	if !s.synced {
		s.synced = true
		s.e.deliver(observation{synced: true})
	}
	return nil
}

func (s *leaseStore) put(obj any, deleted bool) {
	switch l := s.e.post(obj, deleted); {
	case l == nil:
	case deleted:
		s.last = nil
	default:
		s.last = l
	}
}

// post turns a store call into an observation and returns the Lease it
// queued (nil: none, another object). A deletion keeps the deleted object:
// its content may be newer than anything the loop has processed (a relist
// after a watch gap gives DeletedFinalStateUnknown with the last state
// known).
func (e *Elector) post(obj any, deleted bool) *coordinationv1.Lease {
	d, unknown := obj.(cache.DeletedFinalStateUnknown)
	if unknown {
		obj, deleted = d.Obj, true
	}
	l, ok := obj.(*coordinationv1.Lease)
	if !ok || !e.watched(l) {
		return nil
	}
	e.deliver(observation{lease: l, deleted: deleted, unknown: unknown})
	return l
}

// watched reports whether l is the Lease this candidate campaigns on.
func (e *Elector) watched(l *coordinationv1.Lease) bool {
	return l.Name == e.cfg.Name && l.Namespace == e.cfg.Namespace
}

// deliver queues an observation and wakes the loop.
func (e *Elector) deliver(o observation) {
	e.inboxMu.Lock()
	e.inbox = append(e.inbox, o)
	e.inboxMu.Unlock()
	select {
	case e.notify <- struct{}{}:
	default:
	}
}

// drainInbox applies every queued observation, oldest first.
func (e *Elector) drainInbox() {
	e.inboxMu.Lock()
	queue := e.inbox
	e.inbox = nil
	e.inboxMu.Unlock()
	for _, o := range queue {
		switch {
		case o.synced:
			e.markSynced()
		case o.deleted:
			e.observeDeleted(o.lease, !o.unknown)
		default:
			e.observe(o.lease, false)
		}
	}
}

// Step runs one pass of the loop in the caller's goroutine: it applies the
// events given to WatchStore, runs every action due now and publishes
// Status, and returns when to step again (zero: on the next event). It is
// for deterministic simulation of a candidate with ExternalWatch (package
// shards' tests drive many of them in one goroutine); never with Run.
func (e *Elector) Step(ctx context.Context) time.Time {
	e.drainInbox()
	wake := e.process(ctx, ctx)
	e.publish()
	return wake
}

// StepShutdown is Run's release at shutdown, for a candidate driven by Step.
func (e *Elector) StepShutdown(ctx context.Context) error {
	e.drainInbox()
	err := e.shutdownRelease(ctx)
	e.publish()
	return err
}
