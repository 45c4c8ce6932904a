package localapi

import (
	"sync/atomic"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/api"
)

// The /watch event, encoded once and shared by every stream. A change
// wakes every stream at once; the first to look publishes a frame and
// encodes it, the others wait for it on its ready channel (closed once it is
// encoded: they all wake together, no lock is handed from stream to stream)
// and write the same bytes. Only expiresInMs differs between streams (it
// counts down while they write): the shared part stops before it, and each
// stream appends the validity left at the instant it writes, so an event's
// expiresInMs is true when it is written, as before.

// eventFrame is one event: its id (the ETag) and the bytes up to
// expiresInMs. key and ready are set before it is published; the rest
// only before ready is closed.
type eventFrame struct {
	key   etagKey
	ready chan struct{}
	tag   string
	// head is "id: <tag>\nevent: leader\ndata: {...", the /leader body
	// without expiresInMs and the closing brace. Read only.
	head []byte
	// leader: the state has a validity, which runs out at deadline (on
	// h.clock; no later than the election's own instant).
	leader   bool
	deadline time.Time
}

// eventCache holds the newest frame.
type eventCache struct {
	frame atomic.Pointer[eventFrame]
	// encoded counts the frames encoded (tests).
	encoded atomic.Int64
}

// event returns the event of v, a view read at the instant at (taken just
// before it), encoding it only if no stream has yet.
func (h *Handler) event(v *view, at time.Time) *eventFrame {
	k := etagKeyOf(&v.s, v.app, v.releases)
	for {
		f := h.events.frame.Load()
		if f != nil && f.key == k {
			<-f.ready
			if !f.leader || h.clock.Now().Before(f.deadline) {
				return f
			}
		}
		p := &eventFrame{key: k, ready: make(chan struct{})}
		if !h.events.frame.CompareAndSwap(f, p) {
			continue // another stream published one meanwhile: look at it
		}
		h.encode(p, v, at)
		return p
	}
}

// encode fills in f, the event of v read at the instant at, and closes its
// ready channel.
func (h *Handler) encode(f *eventFrame, v *view, at time.Time) {
	defer close(f.ready)
	tag := v.etag()
	r := newLeaderResponse(&v.s, v.app)
	head := make([]byte, 0, 64+len(tag)+256)
	head = append(head, "id: "...)
	head = append(head, tag...)
	head = append(head, "\nevent: "+api.EventLeader+"\ndata: "...)
	head = r.AppendJSONUntilExpiry(head)
	f.tag, f.head, f.leader = tag, head, v.s.IsLeader
	if f.leader {
		f.deadline = at.Add(v.s.ExpiresIn)
	}
	h.events.encoded.Add(1)
}

func (f *eventFrame) id() string     { return f.tag }
func (f *eventFrame) header() []byte { return f.head }

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
