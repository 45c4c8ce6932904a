package shards

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// leaseView is one Lease of the set as this member last saw it.
type leaseView struct {
	obs       *coordinationv1.Lease // nil: absent
	prev      *coordinationv1.Lease // the version obs replaced, as seen (nil: none)
	obsTime   time.Time             // when it last changed, on our clock
	firstObs  time.Time             // first sight of it (or of its absence) since start
	deletedAt time.Time             // its deletion was seen then (zero: none since)
	maxSeen   int64                 // the highest count seen on it
	unknown   bool                  // a deletion found by a relist: the count may have moved unseen
	// newAt: when we first saw the object obs is (its UID); a Lease
	// recreated may hide versions we never saw.
	newAt time.Time
}

// member is one session Lease.
type member struct {
	leaseView
	cur     SessionRef            // the term obs records (zero: free or absent)
	ended   map[SessionRef]ending // terms seen ending, while a shard may name them
	leaving SessionRef            // the term in which it said it leaves
	// deleteAfter: cleanup tried to delete it; not again before this.
	deleteAfter time.Time
}

// ending is when a session term was seen to end, and how long after that
// its holder may still serve (0 with proven: ended by a compare-and-swap
// after it went unrenewed for a lease duration, rule 4).
type ending struct {
	at     time.Time
	wait   time.Duration
	proven bool
}

// shard is one shard Lease.
type shard struct {
	leaseView
	// wait is how long after obsTime the member the version names may
	// serve it (rule 3); meaningful only when it names our term.
	wait   time.Duration
	giving bool // we are moving it away: not served
	// confirmed: the send of the last read or write of ours that found
	// the Lease as obs has it (confirm.go).
	confirmed time.Time
	pending   int64     // a take of ours whose answer was lost: its token
	retryAt   time.Time // after a failed write, nothing before this
}

func holderOf(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func transitionsOf(l *coordinationv1.Lease) int64 {
	if l == nil || l.Spec.LeaseTransitions == nil {
		return 0
	}
	return int64(*l.Spec.LeaseTransitions)
}

func durationOf(l *coordinationv1.Lease) time.Duration {
	if l == nil || l.Spec.LeaseDurationSeconds == nil {
		return 0
	}
	return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
}

// termOf is the session term a session Lease records (zero when free).
func termOf(l *coordinationv1.Lease) SessionRef {
	if holderOf(l) == "" {
		return SessionRef{}
	}
	return SessionRef{Lease: l.Name, UID: string(l.UID), Term: transitionsOf(l)}
}

// sessionOf is the session term a shard Lease names (ok false: none, or
// unreadable).
func sessionOf(l *coordinationv1.Lease) (SessionRef, bool) {
	var r SessionRef
	if l == nil || json.Unmarshal([]byte(l.Annotations[SessionAnnotation]), &r) != nil || r.Lease == "" || r.UID == "" {
		return SessionRef{}, false
	}
	return r, true
}

func moveOf(l *coordinationv1.Lease) (MoveRecord, bool) {
	var r MoveRecord
	if l == nil || json.Unmarshal([]byte(l.Annotations[MoveAnnotation]), &r) != nil || r.From == "" || r.WaitMs < 0 {
		return MoveRecord{}, false
	}
	return r, true
}

// moved reports whether l, seen right after prev, is prev's holder's move
// of its term (rules 2 and 3): the same Lease, the next count, a record
// naming prev's holder and count.
func moved(prev, l *coordinationv1.Lease) (MoveRecord, bool) {
	r, ok := moveOf(l)
	if !ok || prev == nil || prev.UID != l.UID || holderOf(prev) != r.From || transitionsOf(prev) != r.Token || transitionsOf(l) != r.Token+1 {
		return MoveRecord{}, false
	}
	return r, true
}

// ended reports whether l, seen right after prev, is another member's end
// of prev's term (rule 4): the same Lease, freed, the record naming the term.
func endedTerm(prev, l *coordinationv1.Lease) bool {
	var r EndRecord
	if prev == nil || l == nil || prev.UID != l.UID || holderOf(prev) == "" || holderOf(l) != "" ||
		json.Unmarshal([]byte(l.Annotations[EndedAnnotation]), &r) != nil {
		return false
	}
	return r.Term == transitionsOf(prev) && transitionsOf(l) == r.Term && r.By != ""
}

// shardIndex is i for the set's Lease NAME-i with 0 <= i < n.
func shardIndex(set string, n int, l *coordinationv1.Lease) (int, bool) {
	rest, ok := strings.CutPrefix(l.Name, set+"-")
	if !ok || l.Labels[RoleLabel] != RoleShard {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	if err != nil || i < 0 || i >= n || strconv.Itoa(i) != rest {
		return 0, false
	}
	return i, true
}
