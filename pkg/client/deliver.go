package client

import (
	"context"
	"errors"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/api"
)

// The side of Watch that calls fn: it takes the newest state the reader
// (watch.go) received, and replaces an isLeader:true state by the unknown
// state once the sidecar no longer vouches for it.

// received is a state and the instant until which it holds when it says
// isLeader:true (its expiresInMs from when it was requested or read).
type received struct {
	r     api.LeaderResponse
	until time.Time
}

// testHookReceived, when set (tests), is called with every state the reader
// hands over, after it is pending.
var testHookReceived func(api.LeaderResponse)

// IsUnknown reports whether r is the unknown state Watch gives fn when the
// sidecar no longer vouches for the last isLeader:true it sent: not leading,
// not ready, nothing known of the holder.
func IsUnknown(r api.LeaderResponse) bool {
	return !r.IsLeader && !r.Ready && r.NotCandidate == Unknown
}

// Unknown is the notCandidate of the unknown state Watch gives fn.
const Unknown = "unknown: the sidecar has not vouched for this state in time"

func unknownOf(r api.LeaderResponse) api.LeaderResponse {
	return api.LeaderResponse{Identity: r.Identity, Lease: r.Lease, NotCandidate: Unknown}
}

// take returns the pending state, if any.
func (w *watcher) take() (received, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pending
	w.pending = nil
	if p == nil {
		return received{}, false
	}
	return *p, true
}

// forget makes the reader hand over the next state it receives even if it
// is the last one it received (fn has been given the unknown state since),
// and ask for the current state when it reconnects.
func (w *watcher) forget() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last, w.seen = "", nil
	if w.abandon != nil {
		w.abandon(errForgotten)
		w.abandon = nil
	}
}

// serve calls fn with the states the reader hands over, until ctx ends.
func (w *watcher) serve(ctx context.Context) {
	var (
		timer  *time.Timer
		expiry <-chan time.Time
		given  api.LeaderResponse // the last state fn was given
	)
	stop := func() {
		if timer != nil {
			timer.Stop()
			timer, expiry = nil, nil
		}
	}
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
			p, ok := w.take()
			if !ok {
				continue
			}
			stop()
			given = p.r
			if p.r.IsLeader {
				if left := time.Until(p.until); left > 0 {
					timer = time.NewTimer(left)
					expiry = timer.C
				} else {
					w.forget()
					given = unknownOf(p.r)
				}
			}
			w.fn(given)
		case <-expiry:
			timer, expiry = nil, nil
			select {
			case <-w.wake: // a newer state came meanwhile: it decides
				select {
				case w.wake <- struct{}{}:
				default:
				}
				continue
			default:
			}
			w.forget()
			given = unknownOf(given)
			w.fn(given)
		}
	}
}

// errForgotten ends a request that carried an ETag forget has dropped since.
var errForgotten = errors.New("the last state was forgotten (fn was given the unknown state): asking again")

// withLast gives a request the last ETag and a context that forget cancels:
// the sidecar answers a request carrying the ETag of its current state with
// nothing until that state changes, so one still in flight when fn is given
// the unknown state (its expiry) would otherwise wait, and fn with it,
// while the sidecar vouches again for that same state. done ends it; err
// maps the request's error to errForgotten when forget cancelled it.
func (w *watcher) withLast(ctx context.Context) (rctx context.Context, last string, done func(), err func(error) error) {
	rctx, cancel := context.WithCancelCause(ctx)
	w.mu.Lock()
	last = w.last
	w.abandon = cancel
	w.mu.Unlock()
	done = func() {
		w.mu.Lock()
		w.abandon = nil
		w.mu.Unlock()
		cancel(nil)
	}
	err = func(e error) error {
		if e != nil && errors.Is(context.Cause(rctx), errForgotten) && ctx.Err() == nil {
			return errForgotten
		}
		return e
	}
	return rctx, last, done, err
}
