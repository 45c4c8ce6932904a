package shards

import (
	"fmt"
	"hash/fnv"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Labels and annotations of a shard set's Leases. Every Lease of a set
// carries SetLabel (the set's name) and RoleLabel; one watch with the
// selector SetLabel=<name> sees the whole set.
const (
	// SetLabel: the set's name, on its member and shard Leases.
	SetLabel = "elector-sidecar.io/shard-set"
	// RoleLabel: RoleMember on a member's session Lease, RoleShard on a
	// shard's Lease.
	RoleLabel  = "elector-sidecar.io/shard-role"
	RoleMember = "member"
	RoleShard  = "shard"
	// IndexLabel: the shard's index ("0" … "N-1"), on a shard's Lease.
	IndexLabel = "elector-sidecar.io/shard-index"

	// SessionAnnotation, on a shard's Lease: the session term of the
	// member that holds it (SessionRef, JSON). The holder's token is valid
	// only while that term is.
	SessionAnnotation = "elector-sidecar.io/session"
	// MoveAnnotation, on a shard's Lease: written by the previous holder
	// when it handed the shard over (MoveRecord, JSON).
	MoveAnnotation = "elector-sidecar.io/shard-move"
	// EndedAnnotation, on a member's session Lease: another member ended
	// this term after it went unrenewed for a lease duration (EndRecord).
	EndedAnnotation = "elector-sidecar.io/session-ended"
)

// SessionRef names one term of a member's session Lease.
type SessionRef struct {
	Lease string `json:"lease"` // the session Lease's name
	UID   string `json:"uid"`
	Term  int64  `json:"term"` // its leaseTransitions in that term
}

// MoveRecord is the value of MoveAnnotation.
type MoveRecord struct {
	// From is the identity that held the shard, Token its token.
	From  string `json:"from"`
	Token int64  `json:"token"`
	// WaitMs: the new holder serves no earlier than this long after it
	// sees the move (plus the clock skew margin): the validity the old
	// holder's app still held. 0: the app gave the shard back, or none
	// was handed out.
	WaitMs int64 `json:"waitMs,omitempty"`
	// Reason: why it moved (Reason* constants).
	Reason string `json:"reason"`
	// Leaving: the old holder is leaving the set (shutdown, unhealthy
	// app): no shard is planned for it while its session term lasts.
	Leaving bool `json:"leaving,omitempty"`
}

// EndRecord is the value of EndedAnnotation.
type EndRecord struct {
	Term int64  `json:"term"`
	By   string `json:"by"`
}

// Why a shard moves (MoveRecord.Reason, the moves metric, Events).
const (
	ReasonRebalance = "rebalance" // a fair share for a member that joined
	ReasonLeaving   = "leaving"   // its holder shuts down or withdrew
	ReasonReleased  = "released"  // its holder's app gave it back
	ReasonExpired   = "expired"   // its holder's session ran out
	ReasonFree      = "free"      // it was free or did not exist
)

// ShardLeaseName is the name of shard i's Lease: <set>-<i>.
func ShardLeaseName(set string, i int) string { return set + "-" + strconv.Itoa(i) }

// MemberLeaseName is the name of a member's session Lease:
// <set>-member-<identity>, or a hash of the identity when that is not a
// valid Lease name.
func MemberLeaseName(set, identity string) string {
	n := set + "-member-" + identity
	if len(validation.IsDNS1123Subdomain(n)) == 0 {
		return n
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(identity))
	return fmt.Sprintf("%s-member-%016x", set, h.Sum64())
}
