package localapi

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The push side of the local API: GET /leader?wait= (a long-poll on the
// ETag) and GET /watch (server-sent events). Both wait on the elector's
// Changed channel: the election loop only closes a channel, and every
// handler reads the state and does its own writes, so a slow client never
// holds up the loop or another client.
//
// What a slow reader gets: a stream's handler writes one event per change
// it sees (changes that come while it is still writing the previous event,
// or before it wakes, are merged: it writes the state as it is then). Each
// event goes into the connection's socket buffers at once, so a reader that
// pauses finds every event written meanwhile queued, oldest first, the
// latest last; only once those buffers are full (some hundreds of KiB) does
// the handler wait, and then it merges everything until the reader takes
// more, or drops it after the write timeout. A reader that must act only on
// the latest state reads every queued event before it acts (pkg/client's
// Watch does).
//
// A lost stream: the server ends every stream and long-poll when it shuts
// down (CloseStreams, registered by NewServer), after writing the latest
// state; a stream that ends, stalls or drops otherwise says nothing more. An
// isLeader:true holds for its expiresInMs from when it was read and no
// longer (see pkg/client).

// CloseStreams ends every /watch stream (after the latest state, if it has
// not been sent) and answers every waiting long-poll with the state as it is
// now; streams and long-polls that arrive later get the same at once.
// NewServer's server calls it when it shuts down. Idempotent.
func (h *Handler) CloseStreams() {
	if h.closing == nil {
		return // Diagnostics or MetricsOnly: no streams
	}
	h.closeOnce.Do(func() { close(h.closing) })
}

// queryParams parses the query and answers 400 (and false) if it is
// malformed, names a parameter not in allowed, or gives one twice.
func queryParams(w http.ResponseWriter, r *http.Request, allowed ...string) (map[string]string, bool) {
	if r.URL.RawQuery == "" {
		return nil, true
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, "malformed query: "+err.Error())
		return nil, false
	}
	names := make([]string, 0, len(q))
	for k := range q {
		names = append(names, k)
	}
	sort.Strings(names)
	out := make(map[string]string, len(q))
	for _, k := range names {
		known := false
		for _, a := range allowed {
			known = known || k == a
		}
		if !known {
			msg := fmt.Sprintf("unknown query parameter %q on %s", k, r.URL.Path)
			if len(allowed) > 0 {
				msg += "; allowed: " + strings.Join(allowed, ", ")
			} else {
				msg += "; it takes none"
			}
			writeError(w, http.StatusBadRequest, msg)
			return nil, false
		}
		if n := len(q[k]); n > 1 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("query parameter %s: given %d times", k, n))
			return nil, false
		}
		out[k] = q[k][0]
	}
	return out, true
}

// waitQuery reads a long-poll's request (GET /leader, GET /shards): the
// ?wait= duration (0: none) and If-None-Match; false (and a 400 written)
// for a malformed query.
func waitQuery(w http.ResponseWriter, r *http.Request) (wait time.Duration, match string, ok bool) {
	q, ok := queryParams(w, r, "wait")
	if !ok {
		return 0, "", false
	}
	if v, set := q["wait"]; set {
		d, err := parseDuration(v, 0, MaxWait)
		if err != nil {
			writeError(w, http.StatusBadRequest, "query parameter wait: "+err.Error())
			return 0, "", false
		}
		wait = d
	}
	return wait, r.Header.Get("If-None-Match"), true
}

// parseDuration parses a Go duration ("30s", "1m30s") within [lo, hi].
func parseDuration(v string, lo, hi time.Duration) (time.Duration, error) {
	if v == "" {
		return 0, fmt.Errorf("empty; want a duration such as 30s")
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (such as 30s or 1m30s)", v)
	}
	switch {
	case d < lo && lo <= 0:
		return 0, fmt.Errorf("%s: must not be negative", v)
	case d < lo:
		return 0, fmt.Errorf("%s: must be greater than 0", v)
	case d > hi:
		return 0, fmt.Errorf("%s: must be at most %s", v, hi)
	}
	return d, nil
}

// acquire takes one of the waiter slots; false (and a 503 written) when
// all are taken.
func (h *Handler) acquire(w http.ResponseWriter) bool {
	if h.waiters.Add(1) > h.maxWaiters {
		h.waiters.Add(-1)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable,
			"too many watchers and long-polls ("+strconv.FormatInt(h.maxWaiters, 10)+" at most); retry later")
		return false
	}
	return true
}

func (h *Handler) releaseSlot() { h.waiters.Add(-1) }

// longPoll answers GET /leader?wait= with If-None-Match: it returns as soon
// as the ETag no longer matches, or when wait ends (then 304 if nothing
// changed), or when the client goes away.
func (h *Handler) longPoll(w http.ResponseWriter, r *http.Request, match string, wait time.Duration) {
	longPollOn(h, w, r, match, wait, h.el.Changed,
		func() *view { v := h.view(); return &v },
		func(w http.ResponseWriter, v *view) { h.answerLeader(w, v, match) })
}

// longPollOn is the long-poll of a state read with read, whose Changed
// channel is changed and whose answer answer writes (GET /leader's, GET
// /shards'): at once while its ETag does not match; else it takes a waiter
// slot and answers when the ETag changes, when wait ends, or on
// CloseStreams, and ends with no answer when the client goes away.
func longPollOn[S interface{ etag() string }](h *Handler, w http.ResponseWriter, r *http.Request, match string, wait time.Duration,
	changed func() <-chan struct{}, read func() S, answer func(http.ResponseWriter, S)) {
	ch := changed()
	v := read()
	if !etagMatches(match, v.etag()) {
		answer(w, v)
		return
	}
	if !h.acquire(w) {
		return
	}
	defer h.releaseSlot()
	rc := http.NewResponseController(w)
	// The server's read and write timeouts would end the request while it
	// waits; the answer gets its own write deadline below.
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	timer := h.clock.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ch:
			ch = changed()
			v = read()
			if etagMatches(match, v.etag()) {
				continue
			}
		case <-timer.C():
			v = read()
		case <-h.closing:
			v = read()
		case <-r.Context().Done():
			return
		}
		_ = rc.SetWriteDeadline(time.Now().Add(h.writeTimeout))
		answer(w, v)
		return
	}
}

// heartbeat is the comment /watch writes every heartbeat interval, so that
// proxies and clients can tell a quiet stream from a dead one.
var heartbeat = []byte(": heartbeat\n\n")

// watch streams GET /leader's state as server-sent events: the current
// state at once (unless the client's Last-Event-ID is its ETag), then one
// event whenever the ETag changes, each
//
//	id: <ETag>
//	event: leader
//	data: <the /leader body on one line>
//
// Each change the handler sees is written at once; changes that come while
// it writes, or before it wakes, are merged. A reader that pauses finds the
// events written meanwhile queued in the socket buffers, the latest last
// (see the top of this file). On CloseStreams the stream ends after the
// latest state.
func (h *Handler) watch(w http.ResponseWriter, r *http.Request) {
	h.serveStream(w, r, h.el.Changed, func(at time.Time) pushFrame {
		v := h.view()
		return h.event(&v, at)
	})
}

// pushFrame is one event of a /watch stream, shared by every stream: its
// id, the bytes every stream writes alike, and the rest as written at an
// instant (the validity left then).
type pushFrame interface {
	id() string
	header() []byte
	appendTail(b []byte, now time.Time) []byte
}

// serveStream is GET /watch for a state whose Changed channel is changed
// and whose event at an instant (read just after it) next returns: the
// event at once (unless Last-Event-ID is its id), then one whenever the id
// changes, a heartbeat every interval, the latest state on CloseStreams.
// Over HTTP/1.1 the stream runs on its connection, taken over from net/http,
// after the handler returns (stream.go).
func (h *Handler) serveStream(w http.ResponseWriter, r *http.Request, changed func() <-chan struct{}, next func(at time.Time) pushFrame) {
	if _, ok := queryParams(w, r); !ok {
		return
	}
	hdr := w.Header()
	if r.Method == http.MethodHead {
		hdr.Set("Content-Type", "text/event-stream")
		hdr.Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		return
	}
	if !h.acquire(w) {
		return
	}
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Accel-Buffering", "no")
	last := strings.TrimSpace(r.Header.Get("Last-Event-ID"))
	if s := hijackStream(w, r, h.writeTimeout); s != nil {
		h.streams.add()
		go func() {
			defer h.streams.done()
			defer h.releaseSlot()
			s.finish(h.stream(s, last, changed, next))
		}()
		return
	}
	defer h.releaseSlot()
	h.stream(newResponseStream(w, r, h.writeTimeout), last, changed, next)
}

// stream writes a stream's events to s (see serveStream); true if it ended
// cleanly (on CloseStreams, after the latest state), false if the client
// went away or a write failed.
func (h *Handler) stream(s streamConn, last string, changed func() <-chan struct{}, next func(at time.Time) pushFrame) bool {
	if !s.open() {
		return false
	}
	ticker := h.clock.NewTicker(h.heartbeat)
	defer ticker.Stop()
	var tail []byte // this stream's end of each event: `,"expiresInMs":<n>}` and the blank line
	for closed := false; ; {
		ch := changed()
		if f := next(h.clock.Now()); f.id() != last {
			// The shared head, then this stream's tail, in one write.
			tail = f.appendTail(tail[:0], h.clock.Now())
			if !s.send(f.header(), tail) {
				return false
			}
			last = f.id()
		}
		if closed {
			return true
		}
		for waiting := true; waiting; {
			select {
			case <-ch:
				waiting = false
			case <-h.closing:
				closed, waiting = true, false
			case <-ticker.C():
				if !s.send(heartbeat, nil) {
					return false
				}
			case <-s.gone():
				return false
			}
		}
	}
}
