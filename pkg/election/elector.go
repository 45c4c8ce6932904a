package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/elector-sidecar/elector-sidecar/pkg/kubeclient"
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
	control chan control
	done    chan struct{}

	changeMu sync.Mutex
	changed  chan struct{} // closed when Status may have changed
	nextFlip chan time.Time
	started  atomic.Bool
	alive    atomic.Bool

	inboxMu sync.Mutex
	inbox   []observation
	store   *leaseStore // what the watch feeds (informer.go)

	st state // owned by the Run goroutine
	// draw returns a uniform number in [0, 1) for state.draw (tests fix it).
	draw func() float64
}

// leaseClient is the part of the typed client the elector uses.
type leaseClient = kubeclient.LeaseInterface

// New validates cfg and returns a candidate that has not started yet.
func New(cfg Config) (*Elector, error) {
	if errs := cfg.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("invalid election config: %w", errs.ToAggregate())
	}
	if cfg.Client == nil {
		return nil, errors.New("invalid election config: client must be set")
	}
	cfg.LeaseLabels = maps.Clone(cfg.LeaseLabels) // the caller may change its map
	e := &Elector{
		cfg:      cfg,
		clock:    cfg.Clock,
		log:      cfg.Logger,
		leases:   cfg.Client.Leases(cfg.Namespace),
		notify:   make(chan struct{}, 1),
		control:  make(chan control),
		done:     make(chan struct{}),
		changed:  make(chan struct{}),
		nextFlip: make(chan time.Time, 1),
		st:       state{identity: cfg.Identity, withdrawn: cfg.StartWithdrawn, incarnation: newIncarnation()},
		draw:     rand.Float64,
	}
	e.store = &leaseStore{e: e}
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
	if !e.cfg.ExternalWatch {
		if err := e.startInformer(informerCtx); err != nil {
			return fmt.Errorf("watching lease %s: %w", e.cfg.LeaseKey(), err)
		}
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
		err := e.shutdownRelease(relCtx)
		e.publish()
		return err
	}

	flipCtx, stopFlips := context.WithCancel(context.Background())
	defer stopFlips()
	go e.signalFlips(flipCtx)

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
		case req := <-e.control:
			if ctx.Err() != nil {
				req.reply <- shutdown()
				return nil
			}
			reqCtx, cancel := context.WithTimeout(writeCtx, e.cfg.RenewDeadline)
			req.reply <- req.do(reqCtx)
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

// control is a request run by the loop between its actions.
type control struct {
	do    func(ctx context.Context) error
	reply chan error
}

// inLoop runs do in the loop and returns its error (see Release for the
// errors of a request the loop did not take or did not finish in time).
func (e *Elector) inLoop(ctx context.Context, do func(ctx context.Context) error) error {
	if !e.alive.Load() {
		return ErrNotRunning
	}
	req := control{do: do, reply: make(chan error, 1)}
	select {
	case e.control <- req:
	case <-e.done:
		return ErrNotRunning
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrReleaseNotProcessed, ctx.Err())
	}
	select {
	case err := <-req.reply:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrReleaseUnconfirmed, ctx.Err())
	}
}

// Release asks the loop to step down: the token stops at once, then the
// Lease is written free. Not being the leader is not an error. The pod
// does not take the Lease back for one lease duration.
func (e *Elector) Release(ctx context.Context) error {
	return e.ReleaseFor(ctx, 0)
}

// ReleaseFor is Release, and keeps this candidate out of the election for
// d (maintenance); d <= 0 is Release. Status reports Candidate false until
// then.
func (e *Elector) ReleaseFor(ctx context.Context, d time.Duration) error {
	why := "released on request"
	if d > 0 {
		why = fmt.Sprintf("released on request for %s", d)
	}
	return e.inLoop(ctx, func(ctx context.Context) error { return e.releaseFor(ctx, d, why) })
}

// releaseFor is ReleaseFor's body, run by the loop. The app gave the token
// back: followers may take the Lease at once.
func (e *Elector) releaseFor(ctx context.Context, d time.Duration, why string) error {
	if d > 0 {
		e.st.outUntil = laterOf(e.st.outUntil, e.clock.Now().Add(d))
		e.publish()
	}
	return e.stepDown(ctx, why, true)
}

// shutdownRelease is the release at the end of Run: at once when
// Config.ShutdownHandoff says the app has stopped before us, else the
// release tells followers to wait until every validity already handed out
// has run out.
func (e *Elector) shutdownRelease(ctx context.Context) error {
	err := e.stepDown(ctx, "shutting down", e.cfg.ShutdownHandoff == HandoffImmediate)
	e.withdrawAnnouncement(ctx)
	return err
}

// SetCandidate takes this process out of the election (ok false, with the
// reason: a leader stops its token at once and releases the Lease, a
// follower stops campaigning) or puts it back (ok true). Each change is
// logged and recorded as an Event on the Lease; the same call twice is a
// no-op. Errors are Release's.
func (e *Elector) SetCandidate(ctx context.Context, ok bool, reason string) error {
	return e.inLoop(ctx, func(ctx context.Context) error { return e.setCandidate(ctx, ok, reason) })
}

// setCandidate is SetCandidate's body, run by the loop. A withdrawn
// leader's app did not give the token back: the release waits out the
// validity already handed out.
func (e *Elector) setCandidate(ctx context.Context, ok bool, reason string) error {
	s := &e.st
	if ok {
		if s.withdrawn == "" {
			return nil
		}
		s.withdrawn = ""
		e.publish()
		e.log.Info("campaigning again", "reason", reason)
		e.event(corev1.EventTypeNormal, "%s campaigns again: %s", e.cfg.Identity, reason)
		return nil
	}
	if reason == "" {
		reason = "withdrawn"
	}
	if s.withdrawn == reason {
		return nil
	}
	wasLeader := s.term != nil
	s.withdrawn = reason
	e.publish()
	e.log.Info("left the election", "reason", reason, "wasLeader", wasLeader)
	if wasLeader {
		e.event(corev1.EventTypeWarning, "%s stepped down: %s", e.cfg.Identity, reason)
	} else {
		e.event(corev1.EventTypeNormal, "%s left the election: %s", e.cfg.Identity, reason)
	}
	return e.stepDown(ctx, "stepped down: "+reason, false)
}

// Alive reports whether the election loop is running.
func (e *Elector) Alive() bool { return e.alive.Load() }
