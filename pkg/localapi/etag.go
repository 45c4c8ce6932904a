package localapi

import (
	"strconv"
	"strings"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
)

// The ETag of GET /leader, /watch's event ids and the long-poll's condition.

// etagHeader returns the ETag header value of v, computed once per change
// of what it covers (the same for every request until the next renew).
func (h *Handler) etagHeader(v *view) []string {
	k := etagKeyOf(&v.s, v.app, v.releases)
	if c := h.etags.Load(); c != nil && c.key == k {
		return c.value
	}
	c := &etagCache{key: k, value: []string{v.etag()}}
	h.etags.Store(c)
	return c.value
}

// etagKey is everything leaderETag reads, as it reads it.
type etagKey struct {
	isLeader, ready, candidate bool
	app                        appState
	transitions, token, until  int64
	holder, identity, lease    string
	notCandidate               string
	releases                   int64
}

func etagKeyOf(s *election.Status, app appState, releases int64) etagKey {
	k := etagKey{
		isLeader: s.IsLeader, ready: s.Ready, candidate: s.Candidate, app: app,
		transitions: s.LeaseTransitions, token: s.Token,
		holder: s.Holder, identity: s.Identity, lease: s.Lease, notCandidate: s.NotCandidate,
	}
	if !s.ValidUntil.IsZero() {
		k.until = s.ValidUntil.UnixNano()
	}
	if strings.HasPrefix(k.notCandidate, releasedFor) {
		k.notCandidate = releasedFor
		k.releases = releases
	}
	return k
}

type etagCache struct {
	key   etagKey
	value []string
}

// releasedFor is how election words a ReleaseFor time out in NotCandidate,
// followed by the time left; the ETag leaves that countdown out and covers
// the count of POST /release calls instead (a new time out, or one extended,
// is a new ETag).
const releasedFor = "released for "

// leaderETag changes whenever the /leader body would change, except for
// expiresInMs counting down between renewals and the countdown of a
// "released for ..." notCandidate (releases, the count of POST /release
// calls, stands for the time out's end instead): it covers isLeader, holder, identity,
// lease, leaseTransitions, ready, candidate, notCandidate, appHealthy, the
// token, and ValidUntil (the instant the token stops, which moves with every
// renew, when expiresInMs jumps). Numbers are kept verbatim; the strings go
// through an inline FNV-1a, so the only allocation is the returned string.
func leaderETag(s *election.Status, app appState, releases int64) string {
	var buf [96]byte
	b := append(buf[:0], '"')
	if s.IsLeader {
		b = append(b, 'L')
	} else {
		b = append(b, 'F')
	}
	if s.Ready {
		b = append(b, 'R')
	} else {
		b = append(b, 'N')
	}
	if s.Candidate {
		b = append(b, 'C')
	} else {
		b = append(b, 'W')
	}
	b = append(b, "xHU"[app])
	b = strconv.AppendInt(b, s.LeaseTransitions, 36)
	b = append(b, '.')
	b = strconv.AppendInt(b, s.Token, 36)
	b = append(b, '.')
	var until int64
	if !s.ValidUntil.IsZero() {
		until = s.ValidUntil.UnixNano()
	}
	b = strconv.AppendInt(b, until, 36)
	b = append(b, '.')
	h := uint64(fnvOffset64)
	h = fnvString(h, s.Holder)
	h = fnvString(h, s.Identity)
	h = fnvString(h, s.Lease)
	nc := s.NotCandidate
	if strings.HasPrefix(nc, releasedFor) {
		nc = releasedFor
		for n := uint64(releases); ; n >>= 8 {
			h ^= n & 0xff
			h *= fnvPrime64
			if n < 0x100 {
				break
			}
		}
	}
	h = fnvString(h, nc)
	h = fnvString(h, s.CannotLead)
	h = fnvString(h, s.IdentityCollision)
	b = strconv.AppendUint(b, h, 36)
	b = append(b, '"')
	return string(b)
}

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// fnvString hashes s into h (FNV-1a), then its length, so that field
// boundaries count ("ab","c" differs from "a","bc").
func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime64
	}
	for n := uint64(len(s)); ; n >>= 8 {
		h ^= n & 0xff
		h *= fnvPrime64
		if n < 0x100 {
			break
		}
	}
	return h
}

// etagMatches reports whether the If-None-Match header matches etag (weak
// comparison, as RFC 9110 asks for If-None-Match).
func etagMatches(header, etag string) bool {
	for header != "" {
		var t string
		t, header, _ = strings.Cut(header, ",")
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == etag {
			return true
		}
	}
	return false
}
