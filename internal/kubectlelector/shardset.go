package kubectlelector

import (
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/elector-sidecar/elector-sidecar/pkg/shards"
)

// A shard set (elector-sidecar --shards=N) is many Leases: one per shard
// (<set>-<i>, role=shard) and one session Lease per member
// (<set>-member-<identity>, role=member), all labelled with the set's name
// (pkg/shards). `status` shows them as one set: its members, each with the
// shards it holds and their tokens, instead of one row per Lease.

// Member states (ShardMember.State).
const (
	MemberLive      = "live"       // its session Lease is renewed: its shards' tokens are valid
	MemberExpired   = "expired"    // its session ran out unrenewed (renewTime + duration is past)
	MemberEnded     = "ended"      // another member ended the session after it went unrenewed
	MemberLeft      = "left"       // it released its session (it left the set)
	MemberNoSession = "no session" // a shard names it, but it has no session Lease
	// ShardsFree is the pseudo-member of the shards nobody holds.
	ShardsFree = "free"
)

// ShardSetStatus is one shard set as `status -o json|yaml` prints it (kind
// ShardSetStatus for `status SET`, an element of LeaseStatusList.shardSets
// otherwise).
type ShardSetStatus struct {
	metav1.TypeMeta `json:",inline"`
	Namespace       string `json:"namespace"`
	Name            string `json:"name"`
	// Shards is the number of shard Leases; Held how many of them a live
	// member holds with a valid token; Live the live members.
	Shards int `json:"shards"`
	Held   int `json:"held"`
	Live   int `json:"live"`
	// Members by identity; the shards nobody holds last, as the member
	// "free" (State "free").
	Members    []ShardMember    `json:"members"`
	ObservedAt metav1.MicroTime `json:"observedAt"`
	// Events are the last Events on the set's Leases, oldest first (only
	// when one set is asked for).
	Events []LeaseEvent `json:"events,omitempty"`
}

// ShardMember is one member of a set and the shards it holds.
type ShardMember struct {
	Identity string `json:"identity"`
	// State: live, expired, ended, left, no session or free.
	State string `json:"state"`
	// Lease is the member's session Lease ("" without one), UID its uid.
	Lease        string            `json:"lease,omitempty"`
	UID          string            `json:"uid,omitempty"`
	RenewTime    *metav1.MicroTime `json:"renewTime,omitempty"`
	RenewedAgoMs *int64            `json:"renewedAgoMs,omitempty"`
	ExpiresInMs  *int64            `json:"expiresInMs,omitempty"`
	Shards       []HeldShard       `json:"shards"`
}

// HeldShard is one shard Lease of a member (or a free one).
type HeldShard struct {
	Index int    `json:"index"`
	Lease string `json:"lease"`
	UID   string `json:"uid"`
	// Token is the shard Lease's leaseTransitions: its fencing token.
	Token int64 `json:"token"`
	// Valid: the holder's session term the shard was given under
	// (annotation elector-sidecar.io/session) is the member's live term.
	Valid bool `json:"valid"`
}

// inSet reports whether l belongs to a shard set, and which.
func inSet(l *coordinationv1.Lease) (string, bool) {
	s, ok := l.Labels[shards.SetLabel]
	return s, ok && s != ""
}

// ShardSets groups the Leases of shard sets (any Lease labelled
// elector-sidecar.io/shard-set) by namespace and set, at now.
func ShardSets(leases []*coordinationv1.Lease, now time.Time) []ShardSetStatus {
	type key struct{ ns, name string }
	bySet := map[key][]*coordinationv1.Lease{}
	var keys []key
	for _, l := range leases {
		name, ok := inSet(l)
		if !ok {
			continue
		}
		k := key{l.Namespace, name}
		if bySet[k] == nil {
			keys = append(keys, k)
		}
		bySet[k] = append(bySet[k], l)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].ns != keys[j].ns {
			return keys[i].ns < keys[j].ns
		}
		return keys[i].name < keys[j].name
	})
	out := make([]ShardSetStatus, 0, len(keys))
	for _, k := range keys {
		out = append(out, shardSet(k.ns, k.name, bySet[k], now))
	}
	return out
}

// session is a member's session Lease as the set's status needs it.
type session struct {
	uid  string
	term int64
	live bool
}

func shardSet(ns, name string, leases []*coordinationv1.Lease, now time.Time) ShardSetStatus {
	set := ShardSetStatus{TypeMeta: statusTypeMeta("ShardSetStatus"), Namespace: ns, Name: name, ObservedAt: metav1.NewMicroTime(now)}
	members := map[string]*ShardMember{}
	sessions := map[string]session{} // by session Lease name
	member := func(id string) *ShardMember {
		if members[id] == nil {
			members[id] = &ShardMember{Identity: id, State: MemberNoSession, Shards: []HeldShard{}}
		}
		return members[id]
	}
	var shardLeases []*coordinationv1.Lease
	for _, l := range leases {
		if l.Labels[shards.RoleLabel] != shards.RoleMember {
			shardLeases = append(shardLeases, l)
			continue
		}
		st := Status(l, now)
		id := st.Holder
		if id == "" {
			id = strings.TrimPrefix(l.Name, name+"-member-")
		}
		m := member(id)
		m.Lease, m.UID, m.RenewTime, m.RenewedAgoMs, m.ExpiresInMs = l.Name, st.UID, st.RenewTime, st.RenewedAgoMs, st.ExpiresInMs
		m.State = memberState(l, st)
		sessions[l.Name] = session{uid: st.UID, term: st.Token, live: m.State == MemberLive}
		if m.State == MemberLive {
			set.Live++
		}
	}
	free := &ShardMember{Identity: "<none>", State: ShardsFree, Shards: []HeldShard{}}
	for _, l := range shardLeases {
		st := Status(l, now)
		h := HeldShard{Index: shardIndex(l, name), Lease: l.Name, UID: st.UID, Token: st.Token}
		set.Shards++
		if st.Holder == "" {
			free.Shards = append(free.Shards, h)
			continue
		}
		m := member(st.Holder)
		h.Valid = m.State == MemberLive && termIsLive(l, m, sessions)
		if h.Valid {
			set.Held++
		}
		m.Shards = append(m.Shards, h)
	}
	for _, m := range members {
		sortShards(m.Shards)
		set.Members = append(set.Members, *m)
	}
	sort.Slice(set.Members, func(i, j int) bool { return set.Members[i].Identity < set.Members[j].Identity })
	if len(free.Shards) > 0 {
		sortShards(free.Shards)
		set.Members = append(set.Members, *free)
	}
	if set.Members == nil {
		set.Members = []ShardMember{}
	}
	return set
}

// memberState reads a session Lease: left when released, ended when another
// member wrote that it ended this term, expired past renewTime + duration.
func memberState(l *coordinationv1.Lease, st LeaseStatus) string {
	if st.Holder == "" {
		return MemberLeft
	}
	var end shards.EndRecord
	if v, ok := l.Annotations[shards.EndedAnnotation]; ok && json.Unmarshal([]byte(v), &end) == nil && end.Term == st.Token {
		return MemberEnded
	}
	if st.ExpiresInMs == nil || st.Expired {
		return MemberExpired
	}
	return MemberLive
}

// termIsLive reports whether shard Lease l was given under its holder's
// current session term: its session annotation names the holder's session
// Lease, with the same uid and term. A shard Lease without the annotation is
// judged by its holder alone.
func termIsLive(l *coordinationv1.Lease, m *ShardMember, sessions map[string]session) bool {
	v, ok := l.Annotations[shards.SessionAnnotation]
	if !ok {
		return true
	}
	var ref shards.SessionRef
	if json.Unmarshal([]byte(v), &ref) != nil || ref.Lease != m.Lease {
		return false
	}
	s, ok := sessions[ref.Lease]
	return ok && s.live && s.uid == ref.UID && s.term == ref.Term
}

// shardIndex is the index label, else the name's suffix after <set>-, else -1.
func shardIndex(l *coordinationv1.Lease, set string) int {
	if i, err := strconv.Atoi(l.Labels[shards.IndexLabel]); err == nil {
		return i
	}
	if i, err := strconv.Atoi(strings.TrimPrefix(l.Name, set+"-")); err == nil {
		return i
	}
	return -1
}

func sortShards(s []HeldShard) {
	sort.Slice(s, func(i, j int) bool {
		if s[i].Index != s[j].Index {
			return s[i].Index < s[j].Index
		}
		return s[i].Lease < s[j].Lease
	})
}

// DeepCopyObject implements runtime.Object.
func (s *ShardSetStatus) DeepCopyObject() runtime.Object {
	if s == nil {
		return nil
	}
	out := s.deepCopy()
	return &out
}

func (s *ShardSetStatus) deepCopy() ShardSetStatus {
	out := *s
	out.Members = make([]ShardMember, len(s.Members))
	for i, m := range s.Members {
		if m.RenewTime != nil {
			t := *m.RenewTime
			m.RenewTime = &t
		}
		if m.RenewedAgoMs != nil {
			v := *m.RenewedAgoMs
			m.RenewedAgoMs = &v
		}
		if m.ExpiresInMs != nil {
			v := *m.ExpiresInMs
			m.ExpiresInMs = &v
		}
		m.Shards = append([]HeldShard{}, m.Shards...)
		out.Members[i] = m
	}
	if s.Events != nil {
		out.Events = append([]LeaseEvent(nil), s.Events...)
	}
	return out
}
