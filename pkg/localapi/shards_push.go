package localapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/api"
)

// The push side of a shard set's local API: GET /shards?wait= (a long-poll
// on the ETag) and GET /watch's "shards" events, with the rules of
// push.go's /leader long-poll and /watch stream (the waiter limit, the
// write deadlines, the heartbeat, CloseStreams, Last-Event-ID), on the
// set's Changed channel and GET /shards's ETag.

// etag changes whenever the /shards body would change, except for the
// owned shards' expiresInMs counting down: it covers set, identity, shards,
// ready, live, members and every owned shard's index, Lease, UID, token and
// ValidUntil (which moves with every renewal of the member's session).
func (v *shardView) etag() string {
	s := &v.s
	var buf [48]byte
	b := append(buf[:0], '"', 'S')
	if s.Ready {
		b = append(b, 'R')
	} else {
		b = append(b, 'N')
	}
	if s.Live {
		b = append(b, 'L')
	} else {
		b = append(b, 'D')
	}
	b = strconv.AppendInt(b, int64(len(s.Owned)), 36)
	b = append(b, '.')
	h := uint64(fnvOffset64)
	h = fnvString(h, s.Set)
	h = fnvString(h, s.Identity)
	h = fnvUint(h, uint64(s.Shards))
	h = fnvUint(h, uint64(len(s.Members)))
	for _, m := range s.Members {
		h = fnvString(h, m)
	}
	for i := range s.Owned {
		o := &s.Owned[i]
		h = fnvUint(h, uint64(o.Index))
		h = fnvString(h, o.Lease)
		h = fnvString(h, o.LeaseUID)
		h = fnvUint(h, uint64(o.Token))
		var until int64
		if !o.ValidUntil.IsZero() {
			until = o.ValidUntil.UnixNano()
		}
		h = fnvUint(h, uint64(until))
	}
	b = strconv.AppendUint(b, h, 36)
	b = append(b, '"')
	return string(b)
}

// fnvUint hashes the 8 bytes of n into h (FNV-1a).
func fnvUint(h, n uint64) uint64 {
	for k := 0; k < 8; k++ {
		h ^= n & 0xff
		h *= fnvPrime64
		n >>= 8
	}
	return h
}

// shardsLongPoll answers GET /shards?wait= with If-None-Match as longPoll
// answers GET /leader's.
func (h *Handler) shardsLongPoll(w http.ResponseWriter, r *http.Request, match string, wait time.Duration) {
	// Waiting reads with Peek: only the answer hands validity out.
	longPollOn(h, w, r, match, wait, h.shards.set.Changed,
		func() *shardView { return &shardView{s: h.shards.set.Peek()} },
		func(w http.ResponseWriter, _ *shardView) { v := h.shardView(); h.answerShards(w, &v, match) })
}

// shardFrame is one "shards" event, encoded once and shared by every
// stream as eventFrame is: key and ready are set before it is published,
// the rest only before ready is closed.
type shardFrame struct {
	key   string // the ETag: the event's id
	ready chan struct{}
	// head is "id: <tag>\nevent: shards\ndata: {...", up to the first
	// owned shard's expiresInMs (or the whole body, when none is owned).
	head []byte
	// segs: each owned shard's validity, and the bytes after its
	// expiresInMs, up to the next one's (the last: the closing "]}").
	segs []shardSeg
}

type shardSeg struct {
	deadline time.Time // on h.clock
	after    []byte
}

func (f *shardFrame) id() string     { return f.key }
func (f *shardFrame) header() []byte { return f.head }

// live reports whether every owned shard's validity is left at now.
func (f *shardFrame) live(now time.Time) bool {
	for _, s := range f.segs {
		if !now.Before(s.deadline) {
			return false
		}
	}
	return true
}

// appendTail appends the rest of f's event as written at now: each owned
// shard's expiresInMs (the validity left, rounded down, 0 once none is
// left) and what follows it, then the blank line that ends the event.
func (f *shardFrame) appendTail(b []byte, now time.Time) []byte {
	for _, s := range f.segs {
		b = api.AppendShardExpiry(b, max(s.deadline.Sub(now).Milliseconds(), 0))
		b = append(b, s.after...)
	}
	return append(b, "\n\n"...)
}

// shardEvent returns the event of v, read at the instant at, encoding it
// only if no stream has yet (see event).
func (h *Handler) shardEvent(v *shardView, at time.Time) *shardFrame {
	k := v.etag()
	for {
		f := h.shards.events.Load()
		if f != nil && f.key == k {
			<-f.ready
			if f.live(h.clock.Now()) {
				return f
			}
		}
		p := &shardFrame{key: k, ready: make(chan struct{})}
		if !h.shards.events.CompareAndSwap(f, p) {
			continue
		}
		// Encoded from Status: what an event tells is handed out; the
		// wakes that reuse a frame read with Peek (watchShards).
		answer := shardView{s: h.shards.set.Status()}
		encodeShards(p, &answer, at)
		h.shards.encoded.Add(1)
		return p
	}
}

// encodeShards fills in f, the event of v read at the instant at, and
// closes its ready channel.
func encodeShards(f *shardFrame, v *shardView, at time.Time) {
	defer close(f.ready)
	r := v.response()
	head := make([]byte, 0, 128+len(f.key)+96*len(r.Owned))
	head = append(head, "id: "...)
	head = append(head, f.key...)
	head = append(head, "\nevent: "+api.EventShards+"\ndata: "...)
	head = r.AppendJSONUntilOwned(head)
	if len(r.Owned) == 0 {
		f.head = append(head, "[]}"...)
		return
	}
	head = append(head, '[')
	f.head = r.Owned[0].AppendJSONUntilExpiry(head)
	f.segs = make([]shardSeg, len(r.Owned))
	for i := range r.Owned {
		var after []byte
		if i+1 < len(r.Owned) {
			after = r.Owned[i+1].AppendJSONUntilExpiry([]byte{','})
		} else {
			after = []byte("]}")
		}
		f.segs[i] = shardSeg{deadline: at.Add(v.s.Owned[i].ExpiresIn), after: after}
	}
}

// watchShards is GET /watch in shard mode: the /shards state as
// server-sent events, written, merged and ended as watch's "leader" events
// are, each
//
//	id: <ETag>
//	event: shards
//	data: <the /shards body on one line>
func (h *Handler) watchShards(w http.ResponseWriter, r *http.Request) {
	h.serveStream(w, r, h.shards.set.Changed, func(at time.Time) pushFrame {
		v := shardView{s: h.shards.set.Peek()}
		return h.shardEvent(&v, at)
	})
}
