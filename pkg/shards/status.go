package shards

import "time"

// Status is what the local API serves about a set, at one instant.
type Status struct {
	// Set is "namespace/name"; Identity is this member's; Shards is N.
	Set      string
	Identity string
	Shards   int
	// Ready: the set's Leases have been listed since start.
	Ready bool
	// Live: this member's session is valid (it may hold shards).
	Live bool
	// Members are the live members as this member sees them, sorted.
	Members []string
	// Owned are the shards this member may work on now, by index.
	Owned []Owned
}

// Owned is one shard this member holds, with a token safe to use now.
type Owned struct {
	Index    int
	Lease    string // the shard's Lease name
	LeaseUID string
	Token    int64
	// ValidUntil is the instant (on the member's clock) the token stops;
	// ExpiresIn the validity left when Status was taken.
	ValidUntil time.Time
	ExpiresIn  time.Duration
}

// Shard returns the owned shard i, if this member holds it.
func (s Status) Shard(i int) (Owned, bool) {
	for _, o := range s.Owned {
		if o.Index == i {
			return o, true
		}
	}
	return Owned{}, false
}

// snapshot is the loop's published view; immutable once stored.
type snapshot struct {
	ready   bool
	members []string
	owned   []ownedShard
}

// ownedShard is a shard whose Lease names our session term, served from
// serveAt (rule 3) while that term is valid.
type ownedShard struct {
	index   int
	lease   string
	uid     string
	token   int64
	term    SessionRef
	serveAt time.Time
	// until: a lease duration (less the margin) after the send of the
	// last read or write that found the Lease as we know it (confirm.go).
	until time.Time
}

func (s *Set) snapshotOf(v view) snapshot {
	sn := snapshot{ready: s.synced, members: v.members}
	for i := range s.shards {
		sh := &s.shards[i]
		if !s.named(sh, v.self) || sh.giving || lowered(sh) {
			continue
		}
		sn.owned = append(sn.owned, ownedShard{
			index: i, lease: sh.obs.Name, uid: string(sh.obs.UID), token: transitionsOf(sh.obs),
			term: v.self, serveAt: sh.obsTime.Add(sh.wait), until: s.confirmedUntil(sh),
		})
	}
	return sn
}

// publish stores the view for Status and returns when it changes with no
// event (a move's wait running out).
func (s *Set) publish(v view) time.Time {
	sn := s.snapshotOf(v)
	var wake time.Time
	for _, o := range sn.owned {
		if v.now.Before(o.serveAt) {
			wake = earliest(wake, o.serveAt)
		}
		if v.now.Before(o.until) {
			wake = earliest(wake, o.until)
		}
	}
	s.mu.Lock()
	if !sameSnapshot(&s.snap, &sn) {
		s.snap = sn
		s.signalLocked()
	}
	s.mu.Unlock()
	return wake
}

func sameSnapshot(a, b *snapshot) bool {
	if a.ready != b.ready || len(a.members) != len(b.members) || len(a.owned) != len(b.owned) {
		return false
	}
	for k := range a.members {
		if a.members[k] != b.members[k] {
			return false
		}
	}
	for k := range a.owned {
		if a.owned[k] != b.owned[k] {
			return false
		}
	}
	return true
}

// signalLocked wakes Changed's readers; s.mu is held.
func (s *Set) signalLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Status is the set as this member sees it now. It is what the app is
// told: every shard it lists counts as handed out until its ValidUntil
// (a move of that shard makes the next holder wait it out).
func (s *Set) Status() Status { return s.status(true) }

// Peek is Status without handing anything out: for readiness, and for a
// long-poll comparing what changed before it answers.
func (s *Set) Peek() Status { return s.status(false) }

func (s *Set) status(handOut bool) Status {
	st := s.session.Status()
	now := s.clock.Now()
	self := s.selfTerm(st)
	s.mu.Lock()
	defer s.mu.Unlock()
	out := Status{
		Set: s.cfg.Namespace + "/" + s.cfg.Name, Identity: s.cfg.Identity, Shards: s.cfg.Shards,
		Ready: s.snap.ready, Live: self != (SessionRef{}) && s.leaving == "", Members: s.snap.members,
	}
	if self == (SessionRef{}) {
		return out
	}
	for _, o := range s.snap.owned {
		until := o.until
		if st.ValidUntil.Before(until) {
			until = st.ValidUntil
		}
		if o.term != self || now.Before(o.serveAt) || !now.Before(until) {
			continue
		}
		out.Owned = append(out.Owned, Owned{
			Index: o.index, Lease: o.lease, LeaseUID: o.uid, Token: o.token,
			ValidUntil: until, ExpiresIn: until.Sub(now),
		})
		if handOut && until.After(s.handedOut[o.index]) {
			s.handedOut[o.index] = until
		}
	}
	return out
}

// peek lists the shards served now without handing anything out (metrics).
func (s *Set) peek() []int {
	st := s.session.Status()
	now := s.clock.Now()
	self := s.selfTerm(st)
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for _, o := range s.snap.owned {
		if self != (SessionRef{}) && o.term == self && !now.Before(o.serveAt) && now.Before(o.until) && now.Before(st.ValidUntil) {
			out = append(out, o.index)
		}
	}
	return out
}
