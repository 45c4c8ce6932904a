package election

import (
	"context"
	"time"

	"k8s.io/utils/clock"
)

// snapshot is the loop's published state; immutable once stored.
type snapshot struct {
	ready       bool
	exists      bool
	holder      string
	transitions int64
	leaseUID    string
	rv          string
	inTerm      bool
	token       int64
	lastToken   int64
	validUntil  time.Time
	withdrawn   string
	outUntil    time.Time
	collision   string
	cannotLead  string
}

// Status is what the local API serves, evaluated at one instant.
type Status struct {
	// Lease is "namespace/name"; Identity is this candidate's.
	Lease    string
	Identity string
	// Ready: the Lease has been observed (found or not) since start.
	Ready bool
	// Holder is spec.holderIdentity as last observed ("" when free or absent).
	Holder string
	// LeaseTransitions as last observed.
	LeaseTransitions int64
	// LeaseUID of the Lease as last observed.
	LeaseUID string
	// IsLeader: this process acquired the Lease, still holds its term, and
	// the token is safe to use now.
	IsLeader bool
	// HoldsLease: the Lease names this identity, whether or not this process
	// can prove its term is still safe (IsLeader says that).
	HoldsLease bool
	// Token, ExpiresIn and ValidUntil are set only when IsLeader.
	// ValidUntil is the instant (on the elector's clock) the token stops;
	// it moves forward with every successful renew.
	Token      int64
	ExpiresIn  time.Duration
	ValidUntil time.Time
	// LastToken is the token of this process's latest term (0: none yet).
	LastToken int64
	// Candidate: this process campaigns (it may acquire the Lease when it
	// is free or expires). False after SetCandidate(false) (NotCandidate
	// says why) or during ReleaseFor's time out.
	Candidate    bool
	NotCandidate string
	// CannotLead, when set, says why no token can be issued to any
	// candidate (leaseTransitions exhausted) until an operator acts.
	CannotLead string
	// IdentityCollision, when set, says that another process wrote the
	// Lease with this identity: identities must be unique.
	IdentityCollision string
}

// publish stores the loop's state for readers. Called only by the loop.
func (e *Elector) publish() {
	st := &e.st
	s := &snapshot{
		ready:       st.synced,
		exists:      st.obs != nil,
		holder:      holderOf(st.obs),
		transitions: transitionsOf(st.obs),
		leaseUID:    uidOf(st.obs),
		lastToken:   st.lastToken,
	}
	if st.obs != nil {
		s.rv = st.obs.ResourceVersion
	}
	if t := st.term; t != nil {
		s.inTerm = true
		s.token = t.token
		s.validUntil = t.validUntil
		s.leaseUID = t.uid
	}
	s.withdrawn, s.outUntil = st.withdrawn, st.outUntil
	s.collision, s.cannotLead = st.collision, st.cannotLead
	if prev := e.snap.Swap(s); prev != nil && *prev == *s {
		return
	}
	e.signalChange()
	// Status also changes with no event when the token's validity or a
	// time out of the election ends: signalFlips wakes readers then.
	var flip time.Time
	now := e.clock.Now()
	if s.inTerm && s.validUntil.After(now) {
		flip = s.validUntil
	}
	if s.outUntil.After(now) {
		flip = earliest(flip, s.outUntil)
	}
	select {
	case <-e.nextFlip:
	default:
	}
	e.nextFlip <- flip
}

// Changed returns a channel that is closed when Status may have changed:
// read Changed, then Status, then wait on the channel. It fires on every
// change of the published state, and on the elector's clock when the
// token's validity or a time out of the election runs out (which no Lease
// event announces). Safe for concurrent use.
func (e *Elector) Changed() <-chan struct{} {
	e.changeMu.Lock()
	defer e.changeMu.Unlock()
	return e.changed
}

func (e *Elector) signalChange() {
	e.changeMu.Lock()
	close(e.changed)
	e.changed = make(chan struct{})
	e.changeMu.Unlock()
}

// signalFlips calls signalChange at the instants publish names (the latest
// one wins), until ctx ends.
func (e *Elector) signalFlips(ctx context.Context) {
	var (
		timer clock.Timer
		fire  <-chan time.Time
	)
	stop := func() {
		if timer != nil {
			timer.Stop()
			timer, fire = nil, nil
		}
	}
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return
		case at := <-e.nextFlip:
			stop()
			if !at.IsZero() {
				timer = e.clock.NewTimer(max(at.Sub(e.clock.Now()), 0))
				fire = timer.C()
			}
		case <-fire:
			timer, fire = nil, nil
			e.signalChange()
		}
	}
}

// Status returns the state at this instant. Validity is judged now, on the
// monotonic clock, so a stalled loop or API server can never leave a stale
// "leader" behind. Safe for concurrent use; no locks.
func (e *Elector) Status() Status {
	s := e.snap.Load()
	st := Status{
		Lease:             e.cfg.LeaseKey(),
		Identity:          e.cfg.Identity,
		Ready:             s.ready,
		Holder:            s.holder,
		LeaseTransitions:  s.transitions,
		LeaseUID:          s.leaseUID,
		HoldsLease:        s.exists && s.holder == e.cfg.Identity,
		LastToken:         s.lastToken,
		NotCandidate:      s.withdrawn,
		CannotLead:        s.cannotLead,
		IdentityCollision: s.collision,
	}
	now := e.clock.Now()
	if st.NotCandidate == "" && now.Before(s.outUntil) {
		st.NotCandidate = "released for " + s.outUntil.Sub(now).Round(time.Second).String()
	}
	st.Candidate = st.NotCandidate == ""

	if s.inTerm {
		if left := s.validUntil.Sub(now); left > 0 {
			st.IsLeader = true
			st.Token = s.token
			st.ExpiresIn = left
			st.ValidUntil = s.validUntil
		}
	}
	return st
}
