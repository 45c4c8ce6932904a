package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/api"
)

// Watch calls fn with the sidecar's state (GET /leader's body) at once and
// then at every change, until ctx ends; then it returns ctx.Err(). fn runs
// on Watch's goroutine, one call at a time. A goroutine of Watch's own reads
// the sidecar meanwhile, so fn never gets a state that a newer one has
// replaced: after a slow call, fn gets only the newest state received while
// it ran (the states in between are skipped).
//
// fn is never told that this pod leads past the moment the sidecar last
// vouched for it: an isLeader:true state holds for its expiresInMs, counted
// from when the request was sent (GET /leader, a long-poll) or when the
// event was read (GET /watch, which Watch reads as it arrives). If no newer
// state has come by then (the sidecar died, hangs, or the stream stalled or
// dropped), fn gets an unknown state at that moment: isLeader false, ready
// false, no holder, token or expiresInMs, identity and lease as before
// (IsUnknown reports it). A state that is already past its time when fn
// could take it is replaced by the unknown state too. fn gets the
// sidecar's state again as soon as Watch reaches it.
//
// Watch follows the GET /watch stream. When the stream drops, or goes
// silent for longer than the idle timeout (WithIdleTimeout), or the sidecar
// cannot be reached, Watch reconnects after a backoff (WithBackoff) and
// sends the ETag of the last state it gave fn as Last-Event-ID, so fn is
// not called again for a state it has already seen. A sidecar without
// /watch (404) is followed with the GET /leader long-poll instead, and one
// without the long-poll by reading GET /leader every poll interval
// (WithPollInterval); a long-poll that answers 304 before its wait is over
// (a proxy, an old sidecar) is followed by a pause of the poll interval. Every
// error Watch recovers from goes to the error handler (WithErrorHandler).
func (c *Client) Watch(ctx context.Context, fn func(api.LeaderResponse)) error {
	if fn == nil {
		return errors.New("client.Watch: fn is nil")
	}
	w := &watcher{c: c, fn: fn, wake: make(chan struct{}, 1)}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.run(rctx)
	}()
	w.serve(ctx)
	stop()
	<-done
	return ctx.Err()
}

// How Watch follows the sidecar.
type watchMode int

const (
	modeStream   watchMode = iota // GET /watch
	modeLongPoll                  // GET /leader?wait= with If-None-Match
	modePoll                      // GET /leader every poll interval
)

type watcher struct {
	c  *Client
	fn func(api.LeaderResponse)

	// The reader (run) hands the newest state to fn's goroutine (serve)
	// through pending; wake has a value while pending is new.
	wake chan struct{}
	mu   sync.Mutex
	// last is the ETag of the last state received ("": none yet, or the
	// state given to fn since was unknown), seen its body when the sidecar
	// sends no ETag.
	last    string
	seen    *api.LeaderResponse
	pending *received
	// abandon cancels the request in flight that carries last (as
	// Last-Event-ID or If-None-Match); forget calls it (see withLast).
	abandon context.CancelCauseFunc
	// early304: the last long-poll answered 304 before its wait was over.
	early304 bool
}

func (w *watcher) run(ctx context.Context) error {
	mode := modeStream
	backoff := w.c.backoff
	for {
		var answered bool
		var err error
		switch mode {
		case modeStream:
			answered, err = w.stream(ctx)
		case modeLongPoll:
			answered, err = w.longPoll(ctx)
		default:
			answered, err = w.poll(ctx)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if answered {
			backoff = w.c.backoff
		}
		var se *StatusError
		switch {
		case errors.Is(err, errForgotten):
			continue // ask again at once, for the current state
		case mode == modeStream && errors.As(err, &se) && se.StatusCode == http.StatusNotFound:
			mode = modeLongPoll
			w.report(fmt.Errorf("%w (%v): long-polling GET /leader instead", ErrNoWatch, err))
			continue
		case mode == modeLongPoll && errors.Is(err, errNoLongPoll):
			mode = modePoll
			w.report(fmt.Errorf("%w: polling GET /leader every %v instead", err, w.c.pollInterval))
			continue
		case err == nil && mode == modeLongPoll && !w.early304:
			continue // the next long-poll at once
		case err == nil:
			if !sleep(ctx, w.c.pollInterval) {
				return ctx.Err()
			}
			continue
		}
		w.report(err)
		if !sleep(ctx, backoff.Step()) {
			return ctx.Err()
		}
	}
}

func (w *watcher) report(err error) {
	if w.c.onError != nil {
		w.c.onError(err)
	}
}

// sleep waits d or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// deliver hands fn's goroutine the state r with ETag etag, read in answer
// to a request sent (or an event read) at anchor, unless it is the state
// last received.
func (w *watcher) deliver(r *api.LeaderResponse, etag string, anchor time.Time) {
	if testHookReceived != nil {
		defer testHookReceived(*r)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if etag != "" {
		if etag == w.last {
			return
		}
		w.last = etag
	} else {
		// No ETag (a very old sidecar): compare the bodies, without the
		// validity that counts down between renewals.
		cmp := *r
		cmp.ExpiresInMs = 0
		if w.seen != nil && sameState(w.seen, &cmp) {
			return
		}
		w.seen = &cmp
	}
	w.pending = &received{r: *r, until: anchor.Add(time.Duration(r.ExpiresInMs) * time.Millisecond)}
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// lastETag is the ETag of the last state received.
func (w *watcher) lastETag() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

func sameState(a, b *api.LeaderResponse) bool {
	x, y := *a, *b
	x.AppHealthy, y.AppHealthy = nil, nil
	return x == y && (a.AppHealthy == nil) == (b.AppHealthy == nil) &&
		(a.AppHealthy == nil || *a.AppHealthy == *b.AppHealthy)
}

// stream follows one GET /watch connection until it ends; answered is true
// once the sidecar has sent anything (an event or a heartbeat).
func (w *watcher) stream(ctx context.Context) (answered bool, err error) {
	var (
		held    *received // parsed, with more already received behind it
		heldTag string
	)
	rctx, last, done, forgotten := w.withLast(ctx)
	defer done()
	answered, err = w.c.followStream(rctx, last, func(ev streamEvent) error {
		if ev.event != "leader" || len(ev.data) == 0 {
			return nil
		}
		var r api.LeaderResponse
		if err := json.Unmarshal(ev.data, &r); err != nil {
			return fmt.Errorf("GET /watch: the event's data is not the expected JSON (%w): %q", err, ev.data[:min(len(ev.data), 200)])
		}
		heldTag = ev.id
		if !ev.idSet {
			heldTag = ""
		}
		held = &received{r: r, until: ev.anchor} // until: the anchor, here
		return nil
	}, func() {
		if held != nil {
			w.deliver(&held.r, heldTag, held.until)
			held = nil
		}
	})
	return answered, forgotten(err)
}

// streamEvent is one server-sent event of GET /watch.
type streamEvent struct {
	id     string
	idSet  bool // an id: line came (a sidecar always sends one)
	event  string
	data   []byte    // valid only during the call
	anchor time.Time // when the event's first line was read
}

// followStream follows one GET /watch connection (with Last-Event-ID last,
// unless "") until it ends, or the idle timeout passes with nothing read,
// or handle returns an error; answered is true once the sidecar has sent
// anything (an event or a heartbeat). handle gets each event as it is
// parsed; handOver is called whenever nothing more is already received
// behind it (after an event or a heartbeat), and at the end: events
// already received behind one are parsed before it is handed over, so
// only the newest of a queue is.
func (c *Client) followStream(ctx context.Context, last string, handle func(streamEvent) error, handOver func()) (answered bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var idled atomic.Bool
	idle := time.AfterFunc(c.idleTimeout, func() {
		idled.Store(true)
		cancel()
	})
	defer idle.Stop()
	named := func(err error) error {
		if idled.Load() {
			return fmt.Errorf("GET /watch: nothing (no event, no heartbeat) for %v: reconnecting", c.idleTimeout)
		}
		return err
	}
	hdr := http.Header{"Accept": {"text/event-stream"}}
	if last != "" {
		hdr.Set("Last-Event-ID", last)
	}
	resp, err := c.do(sctx, http.MethodGet, "/watch", "", hdr)
	if err != nil {
		return false, named(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if err := checkStatus(resp, "/watch", http.StatusOK); err != nil {
		return false, err
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return false, fmt.Errorf("GET /watch: the answer is %q, not an event stream", ct)
	}
	br := bufio.NewReaderSize(resp.Body, maxBody)
	var ev streamEvent
	defer handOver()
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return true, fmt.Errorf("GET /watch: a line longer than %d bytes", maxBody)
			}
			if errors.Is(err, io.EOF) {
				return answered, fmt.Errorf("GET /watch: the sidecar ended the stream: %w", io.ErrUnexpectedEOF)
			}
			return answered, named(fmt.Errorf("GET /watch: %w", err))
		}
		idle.Reset(c.idleTimeout)
		answered = true
		line = bytes.TrimRight(line, "\r\n")
		if ev.anchor.IsZero() {
			ev.anchor = time.Now()
		}
		switch {
		case len(line) == 0: // the end of an event: dispatch it
			if err := handle(ev); err != nil {
				return true, err
			}
			ev = streamEvent{data: ev.data[:0]}
			if br.Buffered() == 0 {
				handOver()
			}
		case line[0] == ':': // a comment: the heartbeat
			ev.anchor = time.Time{}
			if br.Buffered() == 0 {
				handOver()
			}
		default:
			field, value, _ := strings.Cut(string(line), ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "id":
				ev.id, ev.idSet = value, true
			case "event":
				ev.event = value
			case "data":
				if len(ev.data) > 0 {
					ev.data = append(ev.data, '\n')
				}
				ev.data = append(ev.data, value...)
			}
		}
	}
}

// errNoLongPoll: the sidecar does not know GET /leader's wait=.
var errNoLongPoll = errors.New("the sidecar has no GET /leader long-poll")

// longPoll makes one GET /leader: a plain one while no state is known, else
// a long-poll on the last ETag.
func (w *watcher) longPoll(ctx context.Context) (answered bool, err error) {
	w.early304 = false
	rctx, last, done, forgotten := w.withLast(ctx)
	defer done()
	if last == "" {
		answered, err := w.poll(ctx)
		if err == nil && w.lastETag() == "" {
			return answered, fmt.Errorf("%w: GET /leader sends no ETag", errNoLongPoll)
		}
		return answered, err
	}
	wait := w.c.longPollWait
	lctx, cancel := context.WithTimeout(rctx, wait+w.c.timeout)
	defer cancel()
	sent := time.Now()
	resp, err := w.c.do(lctx, http.MethodGet, "/leader", "wait="+wait.String(), http.Header{"If-None-Match": {last}})
	if err != nil {
		return false, forgotten(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if err := checkStatus(resp, "/leader", http.StatusOK, http.StatusNotModified); err != nil {
		var se *StatusError
		if errors.As(err, &se) && se.StatusCode == http.StatusBadRequest && strings.Contains(se.Message, "wait") {
			return false, fmt.Errorf("%w (%v)", errNoLongPoll, err)
		}
		return false, err
	}
	if resp.StatusCode == http.StatusNotModified {
		// Nothing changed. Before the wait is over, the sidecar (an older
		// one, or a proxy) did not wait: pause before the next.
		w.early304 = time.Since(sent) < wait
		return true, nil
	}
	return true, w.answer(resp, sent)
}

// poll makes one plain GET /leader.
func (w *watcher) poll(ctx context.Context) (answered bool, err error) {
	pctx, cancel := context.WithTimeout(ctx, w.c.timeout)
	defer cancel()
	sent := time.Now()
	resp, err := w.c.do(pctx, http.MethodGet, "/leader", "", nil)
	if err != nil {
		return false, err
	}
	defer func() { _ = resp.Body.Close() }()
	if err := checkStatus(resp, "/leader", http.StatusOK); err != nil {
		return false, err
	}
	return true, w.answer(resp, sent)
}

// answer gives fn a 200 of GET /leader, requested at sent.
func (w *watcher) answer(resp *http.Response, sent time.Time) error {
	var r api.LeaderResponse
	if err := decode(resp, "/leader", &r); err != nil {
		return err
	}
	etag := resp.Header.Get("ETag")
	w.deliver(&r, etag, sent)
	return nil
}
