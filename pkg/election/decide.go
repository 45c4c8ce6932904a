package election

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// The decision: see the package doc for the state diagram and the rules.
// decide reads a state value and the time and names the one thing to do
// now, or when to look again. It never builds a Lease (spec.go does) and
// never calls the API server (actions.go does).

// action names what the loop does next.
type action int

const (
	// actWait: nothing to do until wake (zero: until an event).
	actWait action = iota
	// actRefresh: GET the Lease; a write lost a race and the watch has not
	// brought the winner's version.
	actRefresh
	// actRestore: create the deleted Lease again as it was last known.
	actRestore
	// actRaise: write leaseTransitions up to maxSeen, keeping the holder.
	actRaise
	// actAcquire: take the Lease with a new token (create or update).
	actAcquire
	// actRenew: extend our term.
	actRenew
	// actGiveUp: the renew deadline passed; the term ends (no API call).
	actGiveUp
	// actAccept: take the handoff to us (handoff.go).
	actAccept
	// actAnnounce: add or remove our announcement as a candidate.
	actAnnounce
)

var actionNames = [...]string{"wait", "refresh", "restore", "raise", "acquire", "renew", "giveUp", "accept", "announce"}

func (a action) String() string { return actionNames[a] }

// decision is what decide returns: the action due now, or actWait and when
// to look again (zero: only on an event).
type decision struct {
	action action
	wake   time.Time
}

// term is one acquisition by this process, from the write that took the
// Lease until it is lost or released.
type term struct {
	token      int64
	uid        string    // the Lease's UID the term is on
	lastRenew  time.Time // when the last successful acquire/renew was sent
	nextRenew  time.Time
	validUntil time.Time // the token is served until then
}

// state is everything the loop knows; see the diagram above.
type state struct {
	synced   bool                  // the informer's initial list was handled
	obs      *coordinationv1.Lease // the Lease as last known; nil when absent
	everSeen bool                  // a Lease was observed since start
	obsTime  time.Time             // when the record last changed, on our clock
	maxSeen  int64                 // highest leaseTransitions seen or written

	// Contention (contend.go): this candidate's draw in [0, 1) for the
	// current record, made by the loop when the record changes; the
	// estimate of contenders the observed Lease carries (0: none); and
	// whether the observed free Lease was released while we watched.
	// lost: contended acquisitions lost, less the rounds since in which
	// the Lease was taken before our turn; attempted: we wrote in the
	// current one.
	draw       float64
	contenders float64
	lost       int
	attempted  bool

	// releaseSeen: the observed free Lease is its holder's own release,
	// seen replacing the term it names (record.go: released); only then
	// may it be taken before it expires, releaseWait after we saw it (the
	// validity its holder had handed out; 0: given back).
	releaseSeen bool
	releaseWait time.Duration
	// handoffSeen: the observed Lease is its holder's direct handoff to a
	// successor, seen replacing the term it names (handoff.go: handedOff);
	// handoffWait: the validity the giver's app still held.
	handoffSeen bool
	handoffWait time.Duration
	// announceAfter: no announcement patch before this (handoff.go).
	announceAfter time.Time

	// After the Lease went away.
	deletedAt   time.Time
	restoreFrom *coordinationv1.Lease // the deleted Lease to put back; nil: none
	ownDeletion bool                  // it went while our term on it was valid
	notBefore   time.Time             // no acquisition before this

	term          *term     // nil: not leading
	promisedUntil time.Time // the latest validity any term of ours handed out
	lastToken     int64     // token of this process's latest term (0: none)
	lastTermUID   string
	pendingToken  int64 // an acquire whose outcome is unknown (the answer was lost)
	unreleased    bool  // a release write failed: the Lease may still name our ended term
	holdOff       time.Time
	retryAt       time.Time // after a failed write, nothing before this

	// Candidacy: a candidate that withdrew (e.g. its app is unhealthy)
	// never acquires; one released "for" a while acquires no earlier than
	// outUntil. Both still restore and raise: that keeps the holder.
	withdrawn   string // why this process is out of the election; "": it campaigns
	outUntil    time.Time
	needRefresh bool // a write lost a race: obs is stale
	refreshAt   time.Time
	identity    string
	// incarnation is this process's own mark, written with every acquire:
	// a term is ours only if the Lease carries it, so a second process
	// with our identity can never renew or release our term (nor we its).
	incarnation string

	// What readers are told beyond the term: another process writes with
	// our identity (collision), no token can be issued (cannotLead), and
	// the last operator reset of the count seen (resetSeen).
	collision  string
	cannotLead string
	resetSeen  string
}

// phase names the state for logs and the diagram.
func (s *state) phase() string {
	switch {
	case !s.synced:
		return "syncing"
	case s.term != nil:
		return "leading"
	case s.obs == nil:
		return "absent"
	case holderOf(s.obs) == "":
		return "free"
	default:
		return "following"
	}
}

// decide is the election's algorithm: pure, synchronous, table-tested.
func decide(s *state, c *Config, now time.Time) decision {
	if !s.synced {
		return decision{}
	}
	if s.term != nil && !now.Before(s.term.lastRenew.Add(c.RenewDeadline)) {
		return decision{action: actGiveUp}
	}
	var wake time.Time
	if s.needRefresh {
		if !now.Before(s.refreshAt) {
			return decision{action: actRefresh}
		}
		wake = s.refreshAt
	}
	if s.term != nil {
		// The renew deadline bounds every wait while leading.
		wake = earliest(wake, s.term.lastRenew.Add(c.RenewDeadline))
	}
	if now.Before(s.retryAt) {
		return decision{wake: earliest(wake, s.retryAt)}
	}
	if s.obs == nil && s.restoreFrom != nil && !(s.ownDeletion && s.withdrawn == "" && !now.Before(s.outUntil)) {
		// A campaigning ex-leader of the deleted term recreates it with a
		// new token instead (acquireAt).
		return decision{action: actRestore}
	}
	if t := s.term; t != nil {
		if heldBy(s.obs, s.identity, s.incarnation) && uidOf(s.obs) == t.uid && transitionsOf(s.obs) > t.token {
			return decision{action: actAcquire}
		}
		if !now.Before(t.nextRenew) {
			return decision{action: actRenew}
		}
		return decision{wake: earliest(wake, t.nextRenew)}
	}
	if s.needRefresh {
		return decision{wake: wake}
	}
	if mayAccept(s) && s.withdrawn == "" {
		// Handed to us: accept once the giver's app's validity has run
		// out (our own write starts our validity).
		at := laterOf(laterOf(s.obsTime.Add(handoffWait(s, c)), s.outUntil), s.holdOff)
		if !now.Before(at) {
			return decision{action: actAccept}
		}
		wake = earliest(wake, at)
	}
	if mustAnnounce(s, c, now) {
		return decision{action: actAnnounce}
	}
	if w := announceChangesAt(s, c, now); !w.IsZero() {
		wake = earliest(wake, w)
	}
	if s.obs != nil && s.maxSeen > transitionsOf(s.obs) {
		return decision{action: actRaise}
	}
	if s.withdrawn != "" {
		return decision{wake: wake}
	}
	at := laterOf(acquireAt(s, c), s.outUntil)
	if !now.Before(at) {
		return decision{action: actAcquire}
	}
	return decision{wake: earliest(wake, at)}
}

// acquireAt is when a follower may take the Lease.
func acquireAt(s *state, c *Config) time.Time {
	var at time.Time
	switch {
	case s.ownDeletion && (s.obs == nil || ownRecord(s, s.obs)):
		// Our valid term was on the deleted Lease and our token has
		// stopped: nobody else can hold a valid token, take it back.
		return s.holdOff
	case s.obs == nil:
		at = s.notBefore
	case holderOf(s.obs) == "" && s.releaseSeen:
		// Its holder released it while we watched: at once, or once the
		// validity it had handed out has run out on our clock too.
		wait := s.releaseWait
		if wait > 0 {
			wait += c.ClockSkewMargin
		}
		at = s.obsTime.Add(wait + contendDelay(s, c))
	case s.handoffSeen && !heldBy(s.obs, s.identity, s.incarnation):
		// Handed to another candidate: its successor takes it within a
		// write and a watch event; if it has not after a retry period, it
		// may be dead. It never served this term, and the compare-and-swap
		// lets only one of its acceptance and our acquisition land.
		at = s.obsTime.Add(handoffWait(s, c) + c.RetryPeriod + contendDelay(s, c))
	default:
		// Held, by another candidate or by an earlier process with our
		// identity (whose term we never resume), or free without a release
		// we saw (cleared by hand, recreated, restored, found so at
		// start): whoever held it last may still serve its token, so it
		// is taken only when that term has expired on our clock.
		at = s.obsTime.Add(max(c.LeaseDuration, durationOf(s.obs)) + contendDelay(s, c))
	}
	return laterOf(laterOf(at, s.notBefore), s.holdOff)
}

// ownRecord: l names us at a count no higher than our latest token, so it
// records our own (ended) term and nobody acquired since.
func ownRecord(s *state, l *coordinationv1.Lease) bool {
	return s.lastToken > 0 && heldBy(l, s.identity, s.incarnation) && !handoffPending(l) && transitionsOf(l) <= s.lastToken
}

// ours reports whether l may record a term of this process that was not
// written free: our latest term's Lease, or an acquire whose answer we lost.
func ours(s *state, l *coordinationv1.Lease) bool {
	if !heldBy(l, s.identity, s.incarnation) || handoffPending(l) {
		// A handoff to us is not a term of ours until our acceptance
		// lands (that write removes the record).
		return false
	}
	if s.pendingToken > 0 && transitionsOf(l) == s.pendingToken {
		return true
	}
	return s.lastToken > 0 && uidOf(l) == s.lastTermUID && transitionsOf(l) >= s.lastToken
}
