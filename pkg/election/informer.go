package election

import (
	"context"

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
	synced  bool // marker: the initial list has been handed to the loop
}

// startInformer watches the one Lease (a field selector on its name) and
// queues every event for the loop. When the handler has received the
// initial list, a marker follows it through the same queue, so the loop
// never sees the marker before (or instead of) the events it covers.
func (e *Elector) startInformer(ctx context.Context) error {
	informer := e.newInformer()
	reg, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { e.post(obj, false) },
		UpdateFunc: func(_, obj any) { e.post(obj, false) },
		DeleteFunc: func(obj any) { e.post(obj, true) },
	})
	if err != nil {
		return err
	}
	go informer.RunWithContext(ctx)
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
			e.deliver(observation{synced: true})
		}
	}()
	return nil
}

func (e *Elector) newInformer() cache.SharedIndexInformer {
	selector := "metadata.name=" + e.cfg.Name
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			l, err := e.leases.List(ctx, opts)
			if err != nil {
				e.metrics.apiError("list")
			}
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			w, err := e.leases.Watch(ctx, opts)
			if err != nil {
				e.metrics.apiError("watch")
			}
			return w, err
		},
	}
	// Lets the reflector skip streaming lists with clients that lack them
	// (the fake clientset in unit tests, through kubeclient/clientset.Wrap).
	return cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, e.cfg.Client), &coordinationv1.Lease{}, 0, cache.Indexers{})
}

// post turns an informer callback into an observation. A deletion keeps
// the deleted object: its content may be newer than anything the loop has
// processed (a watch gap gives DeletedFinalStateUnknown with the last state
// the cache had).
func (e *Elector) post(obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted = d.Obj, true
	}
	l, ok := obj.(*coordinationv1.Lease)
	if !ok || l.Name != e.cfg.Name || l.Namespace != e.cfg.Namespace {
		return
	}
	e.deliver(observation{lease: l, deleted: deleted})
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
			e.observeDeleted(o.lease)
		default:
			e.observe(o.lease, false)
		}
	}
}
