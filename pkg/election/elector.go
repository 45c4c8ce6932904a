package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// ReleaseTimeout bounds the final release write on shutdown, and
// WriteGrace how long a write already in flight may still finish after Run's
// context ends, so the process exits within 2 s of SIGTERM even when the
// API server does not answer.
const (
	ReleaseTimeout = 1200 * time.Millisecond
	WriteGrace     = 400 * time.Millisecond
)

// Errors of Release.
var (
	// ErrNotRunning: the election loop has stopped.
	ErrNotRunning = errors.New("election loop is not running")
	// ErrReleaseNotProcessed: the context ended before the loop took the
	// request; nothing changed (a leader still leads).
	ErrReleaseNotProcessed = errors.New("release not processed")
	// ErrReleaseUnconfirmed: the loop took the request (a leader's token
	// has stopped) but the context ended before the Lease write finished.
	ErrReleaseUnconfirmed = errors.New("release taken but not confirmed in time")
)

// Elector is one candidate. Create it with New, run it with Run, read it with
// Status from any goroutine.
type Elector struct {
	cfg     Config
	clock   clock.WithTicker
	log     *slog.Logger
	leases  leaseClient
	metrics *metrics

	snap    atomic.Pointer[snapshot]
	notify  chan struct{}
	release chan chan error
	done    chan struct{}
	started atomic.Bool
	alive   atomic.Bool
	idle    atomic.Bool // the loop is waiting for an event (tests use it)
	wakeAt  atomic.Pointer[time.Time]

	inboxMu sync.Mutex
	inbox   *observation

	// Everything below is owned by the Run goroutine.
	obs         *coordinationv1.Lease // latest known Lease; nil if absent
	synced      bool                  // obs is meaningful (initial list done)
	everSeen    bool                  // the Lease existed at some point since start
	obsTime     time.Time             // when the election record last changed, local clock
	deletedAt   time.Time             // when a Lease we had seen disappeared
	freeToTake  bool                  // absent Lease may be created at once (we held it when it went)
	restoreOf   *coordinationv1.Lease // a deleted Lease to put back as it was (see restore)
	maxSeen     int64                 // highest leaseTransitions ever seen or written
	inTerm      bool                  // we acquired the Lease in this process and have not lost it
	token       int64                 // this term's token
	termUID     string                // UID of the Lease our term is on
	lastRenew   time.Time             // when the last successful acquire/renew was sent
	nextRenew   time.Time             // when to renew next
	validUntil  time.Time             // token validity
	holdOff     time.Time             // after a voluntary release, do not acquire before this
	retryAt     time.Time             // after a failed write, not before this
	needRefresh bool                  // a write conflicted: obs is stale until a newer event or a GET
	refreshAt   time.Time
}

// observation is one informer event: the Lease, or nil when it is gone.
type observation struct {
	lease          *coordinationv1.Lease
	deletedVersion *coordinationv1.Lease // set for a deletion: the last state seen
	synced         bool                  // the informer's initial list is complete
}

// leaseClient is the part of the typed client the elector uses.
type leaseClient interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error)
	Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error)
	Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error)
	List(ctx context.Context, opts metav1.ListOptions) (*coordinationv1.LeaseList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// New validates cfg and returns a candidate that has not started yet.
func New(cfg Config) (*Elector, error) {
	if errs := cfg.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("invalid election config: %w", errs.ToAggregate())
	}
	if cfg.Client == nil {
		return nil, errors.New("invalid election config: client must be set")
	}
	e := &Elector{
		cfg:     cfg,
		clock:   cfg.Clock,
		log:     cfg.Logger,
		leases:  cfg.Client.CoordinationV1().Leases(cfg.Namespace),
		notify:  make(chan struct{}, 1),
		release: make(chan chan error),
		done:    make(chan struct{}),
	}
	if e.clock == nil {
		e.clock = clock.RealClock{}
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	e.log = e.log.With("lease", cfg.LeaseKey(), "identity", cfg.Identity)
	e.snap.Store(&snapshot{})
	m, err := newMetrics(cfg.Registerer, e)
	if err != nil {
		return nil, fmt.Errorf("registering election metrics: %w", err)
	}
	e.metrics = m
	return e, nil
}

// Run campaigns until ctx is done. When it is, a leader releases the Lease
// (bounded by ReleaseTimeout) and Run returns nil. Run may be called once.
func (e *Elector) Run(ctx context.Context) error {
	if !e.started.CompareAndSwap(false, true) {
		return errors.New("election: Run called twice")
	}
	e.alive.Store(true)
	defer func() {
		e.alive.Store(false)
		close(e.done)
	}()

	informerCtx, stopInformer := context.WithCancel(context.WithoutCancel(ctx))
	defer stopInformer()
	informer := e.newInformer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { e.post(obj, false) },
		UpdateFunc: func(_, obj any) { e.post(obj, false) },
		DeleteFunc: func(obj any) { e.post(obj, true) },
	}); err != nil {
		return fmt.Errorf("watching lease %s: %w", e.cfg.LeaseKey(), err)
	}
	go informer.RunWithContext(informerCtx)
	go func() {
		if cache.WaitForCacheSync(informerCtx.Done(), informer.HasSynced) {
			e.deliver(&observation{lease: e.cached(informer), synced: true})
		}
	}()

	// A write in flight when ctx ends must not be cut off: the API server
	// may apply an acquire whose answer we then never see, leaving the Lease
	// held by a process that exits without releasing it. Writes get a short
	// grace instead; if the acquire lands, shutdown releases it.
	writeCtx, cancelWrites := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWrites()
	stopGrace := context.AfterFunc(ctx, func() { time.AfterFunc(WriteGrace, cancelWrites) })
	defer stopGrace()

	timer := e.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wake := e.step(writeCtx)
		e.publish()
		if !timer.Stop() {
			select {
			case <-timer.C():
			default:
			}
		}
		if !wake.IsZero() {
			timer.Reset(max(wake.Sub(e.clock.Now()), 0))
		}
		e.wakeAt.Store(&wake)
		e.idle.Store(true)
		select {
		case <-ctx.Done():
			e.idle.Store(false)
			e.shutdown()
			return nil
		case <-e.notify:
			e.idle.Store(false)
			e.drainInbox()
		case reply := <-e.release:
			e.idle.Store(false)
			relCtx, cancel := context.WithTimeout(writeCtx, e.cfg.RenewDeadline)
			reply <- e.stepDown(relCtx, "released on request")
			cancel()
		case <-timer.C():
			e.idle.Store(false)
		}
	}
}

// Release asks the loop to step down: the token stops at once, then the
// Lease is written free. Not being the leader is not an error.
func (e *Elector) Release(ctx context.Context) error {
	if !e.alive.Load() {
		return ErrNotRunning
	}
	reply := make(chan error, 1)
	select {
	case e.release <- reply:
	case <-e.done:
		return ErrNotRunning
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrReleaseNotProcessed, ctx.Err())
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrReleaseUnconfirmed, ctx.Err())
	}
}

// Alive reports whether the election loop is running.
func (e *Elector) Alive() bool { return e.alive.Load() }

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
	// (the fake clientset in unit tests).
	return cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, e.cfg.Client), &coordinationv1.Lease{}, 0, cache.Indexers{})
}

func (e *Elector) cached(informer cache.SharedIndexInformer) *coordinationv1.Lease {
	obj, exists, err := informer.GetStore().GetByKey(e.cfg.LeaseKey())
	if err != nil || !exists {
		return nil
	}
	l, _ := obj.(*coordinationv1.Lease)
	return l
}

// post turns an informer callback into an observation.
func (e *Elector) post(obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted = d.Obj, true
	}
	l, ok := obj.(*coordinationv1.Lease)
	if !ok || l.Name != e.cfg.Name || l.Namespace != e.cfg.Namespace {
		return
	}
	o := &observation{lease: l}
	if deleted {
		o.lease = nil
		// Keep the deleted object's version, so an older deletion cannot
		// undo a newer observation.
		o.deletedVersion = l
	}
	e.deliver(o)
}

// deliver hands an observation to the loop; only the newest counts, since
// each observation is the whole state. The initial-sync marker is sticky.
func (e *Elector) deliver(o *observation) {
	e.inboxMu.Lock()
	if e.inbox != nil && e.inbox.synced && !o.synced {
		o.synced = true
		if o.lease == nil && o.deletedVersion == nil {
			o.lease = e.inbox.lease
		}
	}
	e.inbox = o
	e.inboxMu.Unlock()
	select {
	case e.notify <- struct{}{}:
	default:
	}
}

func (e *Elector) drainInbox() {
	e.inboxMu.Lock()
	o := e.inbox
	e.inbox = nil
	e.inboxMu.Unlock()
	if o == nil {
		return
	}
	if o.synced && !e.synced {
		e.synced = true
		e.log.Debug("initial list of the lease complete", "found", o.lease != nil)
	}
	if o.deletedVersion != nil {
		if older(o.deletedVersion, e.obs) {
			return
		}
		e.observe(nil, "lease deleted")
		return
	}
	if o.lease == nil {
		if !e.everSeen {
			e.observe(nil, "")
		}
		return
	}
	e.observe(o.lease, "")
}

// observe records the Lease as it now is (nil: it does not exist).
func (e *Elector) observe(l *coordinationv1.Lease, why string) {
	now := e.clock.Now()
	if l == nil {
		if e.obs != nil {
			e.deletedAt = now
			e.obsTime = now
			if e.inTerm {
				e.loseTerm(why)
				e.freeToTake = true
			} else {
				e.restoreOf = e.obs
			}
		}
		e.obs = nil
		return
	}
	e.restoreOf = nil
	if older(l, e.obs) {
		return
	}
	if recordChanged(e.obs, l) {
		e.obsTime = now
	}
	e.needRefresh = false
	e.obs = l
	e.everSeen = true
	e.freeToTake = false
	e.maxSeen = max(e.maxSeen, transitionsOf(l))
	if e.inTerm {
		switch {
		case string(l.UID) != e.termUID:
			e.loseTerm("lease was recreated")
		case holderOf(l) != e.cfg.Identity:
			e.loseTerm(fmt.Sprintf("lease taken by %q", holderOf(l)))
		}
	}
}

// step does what the current state calls for (at most a few API calls) and
// returns when the loop should look again (zero: only on an event).
func (e *Elector) step(ctx context.Context) time.Time {
	now := e.clock.Now()
	if e.inTerm && !now.Before(e.lastRenew.Add(e.cfg.RenewDeadline)) {
		e.loseTerm("renew deadline exceeded")
	}
	if !e.synced {
		return time.Time{}
	}
	if e.needRefresh && !now.Before(e.refreshAt) {
		e.refresh(ctx)
		now = e.clock.Now()
	}
	if !now.Before(e.retryAt) {
		if e.obs == nil && e.restoreOf != nil {
			e.restore(ctx)
			now = e.clock.Now()
		}
		if e.inTerm {
			if !now.Before(e.nextRenew) {
				e.renew(ctx)
			}
		} else if at := e.acquireAt(now); !at.IsZero() && !now.Before(at) {
			e.acquire(ctx)
		}
	}
	return e.nextWake(now)
}

// acquireAt is when a follower may try to take the Lease (zero: not now,
// wait for an event).
func (e *Elector) acquireAt(now time.Time) time.Time {
	if e.needRefresh {
		return time.Time{}
	}
	if e.obs == nil {
		if !e.everSeen || e.freeToTake {
			return laterOf(now, e.holdOff)
		}
		// The Lease we saw was deleted: its holder may still think it
		// leads. Wait out a lease duration from the deletion.
		return laterOf(e.deletedAt.Add(e.cfg.LeaseDuration), e.holdOff)
	}
	if holderOf(e.obs) == "" {
		return laterOf(e.obsTime, e.holdOff)
	}
	// Held, by another candidate or by an earlier process with our
	// identity (whose term we never resume): expiry on our clock.
	d := max(e.cfg.LeaseDuration, durationOf(e.obs))
	return laterOf(e.obsTime.Add(d), e.holdOff)
}

func (e *Elector) nextWake(now time.Time) time.Time {
	var wake time.Time
	if e.needRefresh {
		wake = earliest(wake, e.refreshAt)
	}
	if e.inTerm {
		wake = earliest(wake, laterOf(e.nextRenew, e.retryAt))
		wake = earliest(wake, e.lastRenew.Add(e.cfg.RenewDeadline))
	} else if at := e.acquireAt(now); !at.IsZero() {
		wake = earliest(wake, laterOf(at, e.retryAt))
	}
	return wake
}

// acquire tries to take the Lease with a compare-and-swap write.
func (e *Elector) acquire(ctx context.Context) {
	next := max(e.maxSeen, transitionsOf(e.obs)) + 1
	if next > math.MaxInt32 {
		e.log.Error("cannot acquire: leaseTransitions would overflow int32", "transitions", next-1)
		e.retryAt = e.clock.Now().Add(e.cfg.LeaseDuration)
		return
	}
	sent := e.clock.Now()
	spec := coordinationv1.LeaseSpec{
		HolderIdentity:       ptr(e.cfg.Identity),
		LeaseDurationSeconds: leaseSeconds(e.cfg.LeaseDuration),
		AcquireTime:          microNow(sent),
		RenewTime:            microNow(sent),
		LeaseTransitions:     ptr(int32(next)),
	}
	reqCtx, cancel := context.WithTimeout(ctx, e.cfg.RenewDeadline)
	defer cancel()
	var (
		got  *coordinationv1.Lease
		err  error
		verb string
	)
	if e.obs == nil {
		verb = "create"
		got, err = e.leases.Create(reqCtx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: e.cfg.Name, Namespace: e.cfg.Namespace},
			Spec:       spec,
		}, metav1.CreateOptions{})
	} else {
		verb = "update"
		l := e.obs.DeepCopy()
		spec.PreferredHolder, spec.Strategy = l.Spec.PreferredHolder, l.Spec.Strategy
		l.Spec = spec
		got, err = e.leases.Update(reqCtx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		e.writeFailed(verb, "acquire", err)
		return
	}
	e.observe(got, "")
	e.inTerm = true
	e.token = transitionsOf(got)
	e.termUID = string(got.UID)
	e.renewed(sent)
	e.holdOff = time.Time{}
	e.metrics.acquisitions.Inc()
	e.log.Info("became leader", "token", e.token, "leaseUID", e.termUID)
	e.event(corev1.EventTypeNormal, "%s became leader with fencing token %d", e.cfg.Identity, e.token)
}

// restore puts a deleted Lease back as this follower last saw it: the same
// holder and leaseTransitions at the highest value seen. Its holder may
// still believe it leads, so everyone waits out a lease duration as usual;
// and a candidate that never saw the old Lease (a new pod) finds the old
// count instead of creating a Lease at 1, so tokens keep growing. Many
// followers may race to restore; the API server lets one create win.
func (e *Elector) restore(ctx context.Context) {
	old := e.restoreOf
	e.restoreOf = nil
	now := e.clock.Now()
	spec := *old.Spec.DeepCopy()
	spec.LeaseTransitions = ptr(int32(max(e.maxSeen, transitionsOf(old))))
	spec.RenewTime = microNow(now)
	reqCtx, cancel := context.WithTimeout(ctx, e.cfg.RenewDeadline)
	defer cancel()
	got, err := e.leases.Create(reqCtx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: e.cfg.Name, Namespace: e.cfg.Namespace},
		Spec:       spec,
	}, metav1.CreateOptions{})
	if err != nil {
		if !apierrors.IsAlreadyExists(err) {
			// Fall back to waiting out a lease duration from the deletion.
			e.log.Warn("restoring the deleted lease failed", "err", err)
			e.metrics.apiError("create")
			return
		}
		e.writeFailed("create", "restore", err)
		return
	}
	e.log.Info("restored the deleted lease", "holder", holderOf(got), "leaseTransitions", transitionsOf(got))
	e.observe(got, "")
}

// renew extends our term with a compare-and-swap write. A conflict re-reads
// the Lease and, if it is still ours, tries once more at once.
func (e *Elector) renew(ctx context.Context) {
	for attempt := 0; attempt < 2 && e.inTerm; attempt++ {
		sent := e.clock.Now()
		remaining := e.lastRenew.Add(e.cfg.RenewDeadline).Sub(sent)
		if remaining <= 0 {
			e.loseTerm("renew deadline exceeded")
			return
		}
		l := e.obs.DeepCopy()
		l.Spec.HolderIdentity = ptr(e.cfg.Identity)
		l.Spec.LeaseDurationSeconds = leaseSeconds(e.cfg.LeaseDuration)
		l.Spec.RenewTime = microNow(sent)
		// If someone lowered leaseTransitions by hand, put it back: the
		// Lease must never show less than a token that was issued.
		l.Spec.LeaseTransitions = ptr(int32(max(transitionsOf(l), e.token)))
		reqCtx, cancel := context.WithTimeout(ctx, remaining)
		got, err := e.leases.Update(reqCtx, l, metav1.UpdateOptions{})
		cancel()
		e.metrics.renewDuration.Observe(e.clock.Since(sent).Seconds())
		if err == nil {
			e.observe(got, "")
			e.renewed(sent)
			return
		}
		if !apierrors.IsConflict(err) {
			e.writeFailed("update", "renew", err)
			return
		}
		e.metrics.apiError("update")
		e.refresh(ctx)
	}
	// Two conflicts in a row: back off instead of spinning on the Lease.
	e.retryAt = e.clock.Now().Add(e.cfg.RetryPeriod / 4)
}

// renewed starts a new validity window from the instant the successful
// write was sent: other candidates saw the change no earlier than that.
func (e *Elector) renewed(sent time.Time) {
	e.lastRenew = sent
	e.nextRenew = sent.Add(e.cfg.RetryPeriod)
	e.validUntil = sent.Add(e.cfg.LeaseDuration - e.cfg.ClockSkewMargin)
	e.retryAt = time.Time{}
}

// refresh re-reads the Lease after a conflict.
func (e *Elector) refresh(ctx context.Context) {
	reqCtx, cancel := context.WithTimeout(ctx, e.cfg.RetryPeriod)
	defer cancel()
	l, err := e.leases.Get(reqCtx, e.cfg.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		e.needRefresh = false
		e.observe(nil, "lease deleted")
	case err != nil:
		e.metrics.apiError("get")
		e.log.Warn("reading the lease failed", "err", err)
		e.refreshAt = e.clock.Now().Add(e.cfg.RetryPeriod)
	default:
		e.observe(l, "")
		e.needRefresh = false
	}
}

func (e *Elector) writeFailed(verb, what string, err error) {
	e.metrics.apiError(verb)
	now := e.clock.Now()
	switch {
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err):
		// Someone else wrote first. The watch normally brings the new
		// state at once; if it does not within a retry period, GET it.
		e.log.Debug(what+" lost a race", "err", err)
		e.needRefresh = true
		e.refreshAt = now.Add(e.cfg.RetryPeriod)
	case apierrors.IsNotFound(err) && verb == "update":
		e.observe(nil, "lease deleted")
		e.retryAt = now.Add(e.cfg.RetryPeriod)
	default:
		// Includes NotFound on create: the namespace does not exist.
		e.log.Warn(what+" failed", "err", err)
		e.retryAt = now.Add(e.cfg.RetryPeriod)
	}
}

// loseTerm ends our term: the token stops at once.
func (e *Elector) loseTerm(why string) {
	if !e.inTerm {
		return
	}
	e.inTerm = false
	e.validUntil = time.Time{}
	e.publish()
	e.metrics.losses.WithLabelValues(lossReason(why)).Inc()
	e.log.Warn("lost leadership", "token", e.token, "reason", why)
	e.event(corev1.EventTypeWarning, "%s lost leadership (token %d): %s", e.cfg.Identity, e.token, why)
}

// stepDown stops our token, then writes the Lease free so that a follower
// takes it on the watch event instead of waiting for expiry.
func (e *Elector) stepDown(ctx context.Context, why string) error {
	if !e.inTerm {
		return nil
	}
	token := e.token
	e.inTerm = false
	e.validUntil = time.Time{}
	e.publish() // no token is served from here on
	e.holdOff = e.clock.Now().Add(e.cfg.LeaseDuration)
	e.metrics.releases.Inc()

	var err error
	for attempt := 0; attempt < 2; attempt++ {
		l := e.obs.DeepCopy()
		if holderOf(l) != e.cfg.Identity || string(l.UID) != e.termUID {
			return nil // not ours any more: nothing to release
		}
		now := e.clock.Now()
		l.Spec.HolderIdentity = nil
		l.Spec.RenewTime = microNow(now)
		l.Spec.LeaseTransitions = ptr(int32(max(transitionsOf(l), token)))
		var got *coordinationv1.Lease
		got, err = e.leases.Update(ctx, l, metav1.UpdateOptions{})
		if err == nil {
			e.observe(got, "")
			e.log.Info("released leadership", "token", token, "reason", why)
			e.event(corev1.EventTypeNormal, "%s released leadership (token %d): %s", e.cfg.Identity, token, why)
			return nil
		}
		e.metrics.apiError("update")
		if !apierrors.IsConflict(err) {
			break
		}
		e.refresh(ctx)
	}
	e.log.Warn("releasing the lease failed; followers take over when it expires", "token", token, "err", err)
	return fmt.Errorf("releasing lease %s: %w", e.cfg.LeaseKey(), err)
}

func (e *Elector) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), ReleaseTimeout)
	defer cancel()
	_ = e.stepDown(ctx, "shutting down")
	e.publish()
}

// event records a Kubernetes Event on the Lease (best effort, asynchronous).
func (e *Elector) event(eventType, format string, args ...any) {
	if e.cfg.Recorder == nil {
		return
	}
	ref := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: e.cfg.Name, Namespace: e.cfg.Namespace}}
	if e.obs != nil {
		ref.ObjectMeta = *e.obs.ObjectMeta.DeepCopy()
	}
	e.cfg.Recorder.Eventf(ref, eventType, "LeaderElection", format, args...)
}

func lossReason(why string) string {
	switch why {
	case "renew deadline exceeded":
		return "renew_deadline"
	case "lease deleted":
		return "deleted"
	case "lease was recreated":
		return "recreated"
	default:
		return "taken"
	}
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
