package localapi

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/api"
)

// The /watch event, encoded once and shared by every stream. A change
// wakes every stream at once; the first to look encodes the event, the
// others write the same bytes. Only expiresInMs differs between streams (it
// counts down while they write): the shared part stops before it, and each
// stream appends the validity left at the instant it writes, so an event's
// expiresInMs is true when it is written, as before.

// eventFrame is one event: its id (the ETag) and the bytes up to
// expiresInMs.
type eventFrame struct {
	key etagKey
	tag string
	// head is "id: <tag>\nevent: leader\ndata: {...", the /leader body
	// without expiresInMs and the closing brace. Read only.
	head []byte
	// leader: the state has a validity, which runs out at deadline (on
	// h.clock; no later than the election's own instant).
	leader   bool
	deadline time.Time
}

// eventCache holds the newest frame; mu serializes encoding it, so that
// the streams a change wakes together encode it once.
type eventCache struct {
	frame atomic.Pointer[eventFrame]
	mu    sync.Mutex
	// encoded counts the frames encoded (tests).
	encoded atomic.Int64
}

// usable reports whether f is the event of the state with key k at now.
func (f *eventFrame) usable(k etagKey, now time.Time) bool {
	return f != nil && f.key == k && (!f.leader || now.Before(f.deadline))
}

// event returns the event of v, a view read at the instant at (taken just
// before it), encoding it only if no stream has yet.
func (h *Handler) event(v *view, at time.Time) *eventFrame {
	k := etagKeyOf(&v.s, v.app, v.releases)
	now := h.clock.Now()
	if f := h.events.frame.Load(); f.usable(k, now) {
		return f
	}
	h.events.mu.Lock()
	defer h.events.mu.Unlock()
	if f := h.events.frame.Load(); f.usable(k, now) {
		return f
	}
	tag := v.etag()
	r := newLeaderResponse(&v.s, v.app)
	head := make([]byte, 0, 64+len(tag)+256)
	head = append(head, "id: "...)
	head = append(head, tag...)
	head = append(head, "\nevent: "+api.EventLeader+"\ndata: "...)
	head = r.AppendJSONUntilExpiry(head)
	f := &eventFrame{key: k, tag: tag, head: head, leader: v.s.IsLeader}
	if f.leader {
		f.deadline = at.Add(v.s.ExpiresIn)
	}
	h.events.frame.Store(f)
	h.events.encoded.Add(1)
	return f
}

// appendTail appends the rest of f's event as written at now: expiresInMs
// (the validity left, rounded down; absent when none is left), the closing
// brace and the blank line that ends the event.
func (f *eventFrame) appendTail(b []byte, now time.Time) []byte {
	var ms int64
	if f.leader {
		ms = max(f.deadline.Sub(now).Milliseconds(), 0)
	}
	b = api.AppendExpiry(b, ms)
	return append(b, "\n\n"...)
}
