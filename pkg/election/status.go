package election

import "time"

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
	e.snap.Store(s)
}

// Status returns the state at this instant. Validity is judged now, on the
// monotonic clock, so a stalled loop or API server can never leave a stale
// "leader" behind. Safe for concurrent use; no locks.
func (e *Elector) Status() Status {
	s := e.snap.Load()
	st := Status{
		Lease:            e.cfg.LeaseKey(),
		Identity:         e.cfg.Identity,
		Ready:            s.ready,
		Holder:           s.holder,
		LeaseTransitions: s.transitions,
		LeaseUID:         s.leaseUID,
		HoldsLease:       s.exists && s.holder == e.cfg.Identity,
		LastToken:        s.lastToken,
	}
	if s.inTerm {
		if left := s.validUntil.Sub(e.clock.Now()); left > 0 {
			st.IsLeader = true
			st.Token = s.token
			st.ExpiresIn = left
			st.ValidUntil = s.validUntil
		}
	}
	return st
}
