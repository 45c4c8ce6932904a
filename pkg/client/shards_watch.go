package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/api"
)

// WatchShards calls fn with the shard set as the sidecar sees it (GET
// /shards's state) at once and then at every change, until ctx ends; then
// it returns ctx.Err(). A sidecar that is not a shard set ends it at once
// with an error matching ErrNotShardSet. fn runs on WatchShards's
// goroutine, one call at a time, and only ever gets the newest state
// received (the states in between are skipped).
//
// fn is never told that this member owns a shard past the moment the
// sidecar last vouched for it: each owned shard holds until its Deadline
// (its expiresInMs from when the event was read). If no newer state has
// come by then (the sidecar died, hangs, or the stream stalled or dropped),
// fn gets the state without that shard at that moment.
//
// WatchShards follows the GET /watch stream's "shards" events, and
// reconnects as Watch does (WithBackoff, WithIdleTimeout, Last-Event-ID);
// every error it recovers from goes to the error handler
// (WithErrorHandler).
func (c *Client) WatchShards(ctx context.Context, fn func(ShardSet)) error {
	if fn == nil {
		return errors.New("client.WatchShards: fn is nil")
	}
	w := &shardWatcher{c: c, wake: make(chan struct{}, 1), fatal: make(chan struct{})}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(rctx)
	}()
	err := w.serve(ctx, fn)
	stop()
	<-done
	return err
}

// shardWatcher hands the newest state its reader (run) received to fn's
// goroutine (serve) through pending.
type shardWatcher struct {
	c       *Client
	wake    chan struct{} // has a value while pending is new
	fatal   chan struct{} // closed with err set: the sidecar is not a shard set
	err     error
	mu      sync.Mutex
	last    string // the ETag of the last state received ("": none, or forgotten)
	pending *ShardSet
}

func (w *shardWatcher) run(ctx context.Context) {
	backoff := w.c.backoff
	for {
		answered, err := w.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, ErrNotShardSet) {
			w.err = err
			close(w.fatal)
			return
		}
		if answered {
			backoff = w.c.backoff
		}
		if w.c.onError != nil {
			w.c.onError(err)
		}
		if !sleep(ctx, backoff.Step()) {
			return
		}
	}
}

// deliver hands s to fn's goroutine unless it is the state last received.
func (w *shardWatcher) deliver(s ShardSet) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s.ETag != "" && s.ETag == w.last {
		return
	}
	w.last = s.ETag
	w.pending = &s
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *shardWatcher) lastETag() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// stream follows one GET /watch connection until it ends; answered is true
// once the sidecar has sent anything.
func (w *shardWatcher) stream(ctx context.Context) (answered bool, err error) {
	var held *ShardSet // parsed, with more already received behind it
	return w.c.followStream(ctx, w.lastETag(), func(ev streamEvent) error {
		switch ev.event {
		case api.EventLeader:
			return fmt.Errorf("%w: GET /watch sends %q events (a single Lease); use Watch", ErrNotShardSet, ev.event)
		case api.EventShards:
			r, err := decodeShardsEvent(ev.data)
			if err != nil {
				return err
			}
			s := shardSetOf(&r, ev.id, ev.anchor)
			held = &s
		}
		return nil
	}, func() {
		if held != nil {
			w.deliver(*held)
			held = nil
		}
	})
}

// take returns the pending state, if any.
func (w *shardWatcher) take() (ShardSet, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pending
	w.pending = nil
	if p == nil {
		return ShardSet{}, false
	}
	return *p, true
}

// forget makes the reader hand over the next state even if it is the last
// one received (fn was given less since), and ask for the current state
// when it reconnects.
func (w *shardWatcher) forget() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = ""
}

// serve calls fn with the states the reader hands over, each without the
// shards whose Deadline has passed, until ctx ends (ctx.Err()) or the
// reader finds the sidecar is not a shard set (that error).
func (w *shardWatcher) serve(ctx context.Context, fn func(ShardSet)) error {
	var (
		timer  *time.Timer
		expiry <-chan time.Time
		given  ShardSet
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	give := func(s ShardSet) {
		if timer != nil {
			timer.Stop()
			timer, expiry = nil, nil
		}
		if pruned, ok := withoutExpired(s, time.Now()); ok {
			s = pruned
			w.forget()
		}
		if len(s.Owned) > 0 {
			next := s.Owned[0].Deadline
			for _, t := range s.Owned[1:] {
				if t.Deadline.Before(next) {
					next = t.Deadline
				}
			}
			timer = time.NewTimer(time.Until(next))
			expiry = timer.C
		}
		given = s
		fn(s)
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.fatal:
			return w.err
		case <-w.wake:
			if s, ok := w.take(); ok {
				give(s)
			}
		case <-expiry:
			timer, expiry = nil, nil
			if s, ok := w.take(); ok { // a newer state came meanwhile: it decides
				give(s)
				continue
			}
			give(given)
		}
	}
}

// withoutExpired returns s without the owned shards whose Deadline is not
// after now, and whether there were any.
func withoutExpired(s ShardSet, now time.Time) (ShardSet, bool) {
	keep := make([]ShardToken, 0, len(s.Owned))
	for _, t := range s.Owned {
		if t.Deadline.After(now) {
			keep = append(keep, t)
		}
	}
	if len(keep) == len(s.Owned) {
		return s, false
	}
	s.Owned = keep
	return s, true
}

// RunShards runs fn once for every shard this member comes to own, each in
// a goroutine of its own with the shard's token and a context that is
// cancelled (cause: an error matching ErrShardLost, see context.Cause) as
// soon as this member no longer holds the shard with that token: the
// sidecar's state no longer lists it (handed to another member, released,
// the session lost) or lists it with another token, or its Deadline ran out
// with no word from the sidecar (WatchShards). The contexts also end with
// ctx; RunShards returns ctx.Err() once every fn has returned (or at once
// an error matching ErrNotShardSet).
//
// fn must return when its context is done: a shard's next fn (a new token
// for the same shard) starts only after the previous one has returned, so
// two calls for one shard never overlap. A fn that returns early is not
// called again for the same token. Still fence every write with the
// shard's token (shard.Fencing()): the context is cancelled when the client
// learns that the shard moved, which may be later than the moment it did.
func (c *Client) RunShards(ctx context.Context, fn func(ctx context.Context, shard ShardToken)) error {
	if fn == nil {
		return errors.New("client.RunShards: fn is nil")
	}
	type worker struct {
		tok    ShardToken
		cancel context.CancelCauseFunc
		done   chan struct{}
	}
	running := map[int]*worker{} // by index: the term fn runs (or ran) in
	stop := func(ws []*worker, cause func(*worker) error) {
		for _, w := range ws {
			w.cancel(cause(w))
		}
		for _, w := range ws {
			<-w.done
		}
	}
	err := c.WatchShards(ctx, func(s ShardSet) {
		var lost []*worker
		for i, w := range running {
			if t, ok := s.Shard(i); !ok || t.Token != w.tok.Token || t.LeaseUID != w.tok.LeaseUID {
				lost = append(lost, w)
				delete(running, i)
			}
		}
		stop(lost, func(w *worker) error {
			if t, ok := s.Shard(w.tok.Index); ok {
				return fmt.Errorf("%w: shard %d's token changed from %d to %d", ErrShardLost, w.tok.Index, w.tok.Token, t.Token)
			}
			return fmt.Errorf("%w: shard %d (token %d) is no longer owned, or the sidecar did not vouch for it in time", ErrShardLost, w.tok.Index, w.tok.Token)
		})
		for _, t := range s.Owned {
			if _, ok := running[t.Index]; ok {
				continue
			}
			wctx, cancel := context.WithCancelCause(ctx)
			w := &worker{tok: t, cancel: cancel, done: make(chan struct{})}
			running[t.Index] = w
			go func() {
				defer close(w.done)
				fn(wctx, t)
			}()
		}
	})
	all := make([]*worker, 0, len(running))
	for _, w := range running {
		all = append(all, w)
	}
	stop(all, func(*worker) error { return context.Cause(ctx) })
	return err
}
