package shards

import (
	"slices"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
)

// view is what one pass of the loop decides on.
type view struct {
	now     time.Time
	self    SessionRef        // our session's current term (zero: not live)
	members []string          // live members' identities, sorted (us included when live and staying)
	byID    map[string]string // live identity -> its session Lease
	owner   []string          // the live member holding each shard ("": none)
}

// selfTerm is our session's term when it is valid (rule 1).
func (s *Set) selfTerm(st election.Status) SessionRef {
	if !st.IsLeader {
		return SessionRef{}
	}
	return SessionRef{Lease: s.sessionName, UID: st.LeaseUID, Term: st.Token}
}

// staleAt is when a member's current term has gone unrenewed for a lease
// duration on our clock: then it may be ended (rule 4).
func (s *Set) staleAt(m *member) time.Time {
	return m.obsTime.Add(max(s.cfg.LeaseDuration, durationOf(m.obs)))
}

// look builds the view: who is live, who holds what.
func (s *Set) look(now time.Time, st election.Status) view {
	v := view{now: now, self: s.selfTerm(st), byID: map[string]string{}}
	for name, m := range s.members {
		if m.cur == (SessionRef{}) || m.leaving == m.cur {
			continue
		}
		if name == s.sessionName {
			if v.self != m.cur || s.leaving != "" {
				continue
			}
		} else if !now.Before(s.staleAt(m)) {
			continue
		}
		v.byID[holderOf(m.obs)] = name
	}
	for id := range v.byID {
		v.members = append(v.members, id)
	}
	slices.Sort(v.members)
	v.owner = make([]string, len(s.shards))
	for i := range s.shards {
		v.owner[i] = s.ownerOf(&v, &s.shards[i])
	}
	return v
}

// ownerOf is the live member holding sh: the one it names, in the term it
// names, if that is the member's current live term.
func (s *Set) ownerOf(v *view, sh *shard) string {
	l := sh.obs
	if l == nil {
		l = sh.prev // deleted while held: still its holder's until restored
	}
	ref, ok := sessionOf(l)
	if !ok {
		return ""
	}
	id := holderOf(l)
	name, live := v.byID[id]
	if !live || name != ref.Lease {
		return ""
	}
	if m := s.members[name]; m == nil || m.cur != ref {
		return ""
	}
	return id
}

// ours reports whether we may serve sh now (rule 1 and 3), given our term.
func (s *Set) ours(sh *shard, self SessionRef, now time.Time) bool {
	if self == (SessionRef{}) || sh.giving || holderOf(sh.obs) != s.cfg.Identity {
		return false
	}
	ref, ok := sessionOf(sh.obs)
	return ok && ref == self && !now.Before(sh.obsTime.Add(sh.wait)) && !lowered(sh)
}

// lowered: the Lease's count is below one seen before (put back lower, or
// edited): its holder takes it again above every count seen (act) rather
// than serve a token that went backwards.
func lowered(sh *shard) bool { return transitionsOf(sh.obs) < sh.maxSeen }

// takeAt is rule 4: when we may take sh, a shard no live member holds.
// end, when set, is a session term that must be ended first (it went
// unrenewed for a lease duration): at is then when that is allowed.
func (s *Set) takeAt(sh *shard, now time.Time) (at time.Time, end *member) {
	d := s.cfg.LeaseDuration
	l := sh.obs
	switch {
	case l == nil && sh.prev == nil:
		// Never seen: it may have just been deleted with its holder still
		// serving, as the election waits for a Lease it never saw; in a
		// set whose other shards our list found it was deleted, and
		// members that saw it put it back (putBack): give them longer.
		wait := d
		if s.setExisted {
			wait = 3 * d
		}
		return laterOf(s.syncedAt.Add(wait), sh.retryAt), nil
	case l == nil:
		// Deleted: whoever held it stopped serving it within a lease
		// duration of the deletion (confirm.go); its holder puts it back
		// for itself at once, the others (putBack) as it was.
		return laterOf(laterOf(sh.deletedAt.Add(d), sh.retryAt), s.owedUntil(sh)), nil
	case holderOf(l) == "":
		wait := max(d, durationOf(l))
		if r, ok := moved(sh.prev, l); ok {
			wait = time.Duration(r.WaitMs) * time.Millisecond
			if wait > 0 {
				wait += s.cfg.ClockSkewMargin
			}
		}
		return laterOf(sh.obsTime.Add(wait), sh.retryAt), nil
	}
	// A moved shard also owes its giver's app the validity it still held
	// (the record's wait, from when we saw the move), whoever holds it now.
	owed := laterOf(sh.retryAt, s.owedUntil(sh))
	if sh.prev == nil || sh.prev.UID != l.UID {
		// Recreated (put back by a member that saw it deleted, or by
		// hand): versions we never saw may owe a validity (rule 2), at
		// most a lease duration.
		owed = laterOf(owed, sh.newAt.Add(max(d, durationOf(l))))
	}
	at, end = s.heldTakeAt(sh, now)
	if at.IsZero() {
		return at, end
	}
	return laterOf(at, owed), end
}

// owedUntil is when the validity that sh's last move recorded (its
// giver's app's) has run out on our clock (zero: none owed). Whoever takes
// or moves the shard next waits it out, or carries it on.
func (s *Set) owedUntil(sh *shard) time.Time {
	l := sh.obs
	if l == nil {
		l = sh.prev // deleted: what it owed, from when we saw it go
	}
	r, ok := moveOf(l)
	if !ok || r.WaitMs == 0 {
		return time.Time{}
	}
	return sh.obsTime.Add(time.Duration(r.WaitMs)*time.Millisecond + s.cfg.ClockSkewMargin)
}

// heldTakeAt is rule 4 for a shard whose Lease names a holder: when the
// session term it names is over on our clock.
func (s *Set) heldTakeAt(sh *shard, now time.Time) (at time.Time, end *member) {
	d := s.cfg.LeaseDuration
	l := sh.obs
	ref, ok := sessionOf(l)
	if !ok {
		return sh.obsTime.Add(max(d, durationOf(l))), nil
	}
	m := s.members[ref.Lease]
	switch {
	case m == nil:
		// A session we have not seen (our watch may lag behind the shard
		// we read): read it first (readSession).
		return now, &member{cur: ref}
	case m.cur == ref && ref.Lease == s.sessionName:
		// Our own session, in a term our candidate does not (yet) hold
		// as valid: never ended by this layer (rule 5); it renews or
		// loses it.
		return time.Time{}, nil
	case m.cur == ref:
		return s.staleAt(m), m
	}
	if e, ok := m.ended[ref]; ok {
		if e.proven {
			return e.at, nil
		}
		return e.at.Add(e.wait), nil
	}
	// A term of that session we never saw, older or newer than what we
	// saw: read the session first (readSession).
	return now, &member{cur: ref}
}

// anyShardSeen: some shard Lease of the set exists as far as we know.
func (s *Set) anyShardSeen() bool {
	for i := range s.shards {
		if s.shards[i].obs != nil {
			return true
		}
	}
	return false
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// earliest is the earlier of two wake times (zero: none).
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
