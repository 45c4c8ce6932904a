package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"
)

// Shutdown timing: a write already in flight when Run's context ends may
// finish for WriteGrace (the API server may apply it even if we stop
// waiting: an acquire we never saw answered would leave the Lease held);
// then the final release runs, and everything is over ShutdownTimeout after
// the context ended, so the process exits well within 2 s of SIGTERM even
// when the API server does not answer.
const (
	WriteGrace      = 400 * time.Millisecond
	ShutdownTimeout = 1500 * time.Millisecond
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

	inboxMu sync.Mutex
	inbox   []observation

	st state // owned by the Run goroutine
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
		st:      state{identity: cfg.Identity},
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

// Run campaigns until ctx is done. When it is, no new write starts; a
// leader releases the Lease and Run returns nil within ShutdownTimeout.
// Run may be called once.
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
	if err := e.startInformer(informerCtx); err != nil {
		return fmt.Errorf("watching lease %s: %w", e.cfg.LeaseKey(), err)
	}

	writeCtx, cancelWrites := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWrites()
	var doneAt atomic.Int64
	stopGrace := context.AfterFunc(ctx, func() {
		doneAt.Store(time.Now().UnixNano())
		time.AfterFunc(WriteGrace, cancelWrites)
	})
	defer stopGrace()
	shutdown := func() error {
		start := time.Now()
		if at := doneAt.Load(); at != 0 {
			start = time.Unix(0, at)
		}
		relCtx, cancel := context.WithDeadline(context.Background(), start.Add(ShutdownTimeout))
		defer cancel()
		err := e.stepDown(relCtx, "shutting down")
		e.publish()
		return err
	}

	timer := e.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if ctx.Err() != nil {
			_ = shutdown()
			return nil
		}
		wake := e.process(ctx, writeCtx)
		if !timer.Stop() {
			select {
			case <-timer.C():
			default:
			}
		}
		if !wake.IsZero() {
			timer.Reset(max(wake.Sub(e.clock.Now()), 0))
		}
		e.publish() // after the timer is set: a reader that sees this state may move a fake clock
		select {
		case <-ctx.Done():
		case <-e.notify:
			e.drainInbox()
		case reply := <-e.release:
			if ctx.Err() != nil {
				reply <- shutdown()
				return nil
			}
			relCtx, cancel := context.WithTimeout(writeCtx, e.cfg.RenewDeadline)
			reply <- e.stepDown(relCtx, "released on request")
			cancel()
		case <-timer.C():
		}
	}
}

// maxActionsPerWake bounds the actions one wake-up may run; decide never
// asks for more in a row unless something is badly wrong.
const maxActionsPerWake = 8

// process runs decide's actions until nothing is due now and returns when
// to look again (zero: on an event). After ctx ends no action starts: the
// loop only releases.
func (e *Elector) process(ctx, writeCtx context.Context) time.Time {
	for range maxActionsPerWake {
		if ctx.Err() != nil {
			return time.Time{}
		}
		d := decide(&e.st, &e.cfg, e.clock.Now())
		if d.action == actWait {
			return d.wake
		}
		e.log.Debug("deciding", "phase", e.st.phase(), "action", d.action.String())
		e.execute(writeCtx, d.action)
		e.publish()
	}
	e.log.Warn("too many actions in one wake-up; backing off")
	e.st.retryAt = e.clock.Now().Add(e.cfg.RetryPeriod / 4)
	return e.st.retryAt
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
