package shards

import (
	"context"
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxInFlight bounds the writes one pass sends at once (a member leaving
// with hundreds of shards sends them together, not one by one).
const maxInFlight = 128

// write is one Lease write of a pass.
type write struct {
	shard  int     // -1: a session Lease (end)
	member *member // for an end
	lease  *coordinationv1.Lease
	create bool
	what   string // give, take, free, end
	reason string
	to     string
	got    *coordinationv1.Lease
	err    error
	sent   time.Time
}

// act carries out our part of the plan and returns when to look again.
func (s *Set) act(ctx context.Context, v *view) (wake time.Time) {
	moves := plan(v.members, v.owner)
	var writes []*write
	var giving []int
	ends := map[*member]*coordinationv1.Lease{} // the version judged unrenewed
	reads := map[SessionRef]bool{}
	for _, i := range slices.Sorted(mapsKeys(moves)) {
		to, sh := moves[i], &s.shards[i]
		switch {
		case s.named(sh, v.self) && to != s.cfg.Identity:
			giving = append(giving, i)
		case v.owner[i] == "" && to == s.cfg.Identity && !s.named(sh, v.self):
			at, end := s.takeAt(sh, v.now)
			switch {
			case at.IsZero():
			case v.now.Before(at):
				wake = earliest(wake, at)
			case end != nil && end.obs == nil:
				reads[end.cur] = true
			case end != nil:
				ends[end] = end.obs
			default:
				writes = append(writes, s.takeWrite(i, v, ReasonOf(sh, s)))
			}
		}
	}
	if s.leaving != "" && len(v.members) == 0 {
		// The last member: nobody to give to, free them.
		for i := range s.shards {
			if s.named(&s.shards[i], v.self) {
				giving = append(giving, i)
			}
		}
	}
	// A shard deleted (by hand): put back at once by every member that saw
	// it, as it was (its holder's term, judged as before), with the count
	// 1000 above after a deletion found by a relist; its holder puts it
	// back for itself with a new token.
	for i := range s.shards {
		sh := &s.shards[i]
		if sh.obs == nil && sh.prev != nil && !s.namedIn(sh.prev, v.self) && !v.now.Before(sh.retryAt) {
			writes = append(writes, s.putBack(i))
			continue
		}
		if sh.obs == nil && sh.prev != nil && s.namedIn(sh.prev, v.self) {
			if at := laterOf(sh.retryAt, s.owedUntil(sh)); v.now.Before(at) {
				wake = earliest(wake, at)
				continue
			}
			writes = append(writes, s.takeWrite(i, v, ReasonFree))
		}
	}
	// A shard of ours whose count went below one seen: a new token for
	// us, above every count seen.
	for i := range s.shards {
		sh := &s.shards[i]
		if s.named(sh, v.self) && lowered(sh) && !sh.giving && !v.now.Before(laterOf(sh.retryAt, s.owedUntil(sh))) {
			writes = append(writes, s.takeWrite(i, v, ReasonFree))
		}
	}
	// A shard we stopped serving for a move that is no longer planned
	// (the write's outcome unknown): take it back with a new token.
	for i := range s.shards {
		sh := &s.shards[i]
		if sh.giving && s.named(sh, v.self) && !slices.Contains(giving, i) && moves[i] == "" && !v.now.Before(laterOf(sh.retryAt, s.owedUntil(sh))) {
			writes = append(writes, s.takeWrite(i, v, ReasonReleased))
		}
	}
	for _, ref := range slices.SortedFunc(maps.Keys(reads), func(a, b SessionRef) int { return strings.Compare(a.Lease+a.UID, b.Lease+b.UID) }) {
		s.readSession(ctx, ref)
	}
	for _, m := range slices.SortedFunc(maps.Keys(ends), func(a, b *member) int { return strings.Compare(a.obs.Name, b.obs.Name) }) {
		if m.obs != ends[m] {
			continue // a read since showed it renewed: judged again next pass
		}
		writes = append(writes, s.endWrite(m))
	}
	if len(giving) > 0 {
		waits := s.stopServing(giving, v.now)
		for k, i := range giving {
			to := moves[i]
			reason := ReasonRebalance
			if s.leaving != "" {
				reason = ReasonLeaving
			}
			if to == "" {
				writes = append(writes, s.moveWrite(i, "", SessionRef{}, waits[k], reason, v.now))
				continue
			}
			writes = append(writes, s.moveWrite(i, to, s.members[v.byID[to]].cur, waits[k], reason, v.now))
		}
	}
	s.send(ctx, writes)
	return wake
}

func mapsKeys(m map[int]string) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// ReasonOf is why we take sh: its holder's session ran out, or it was free.
func ReasonOf(sh *shard, s *Set) string {
	if holderOf(sh.obs) != "" {
		return ReasonExpired
	}
	return ReasonFree
}

// named reports whether sh's Lease names our session term self.
func (s *Set) named(sh *shard, self SessionRef) bool { return s.namedIn(sh.obs, self) }

func (s *Set) namedIn(l *coordinationv1.Lease, self SessionRef) bool {
	ref, ok := sessionOf(l)
	return self != (SessionRef{}) && ok && ref == self && holderOf(l) == s.cfg.Identity
}

// stopServing takes shards out of what Status serves, then returns, for
// each, the validity it had already handed out (from now), so the
// receiver waits it out (rule 2). A shutdown with immediate handoff owes
// none.
func (s *Set) stopServing(idx []int, now time.Time) []time.Duration {
	for _, i := range idx {
		s.shards[i].giving = true
	}
	s.mu.Lock()
	s.snap = s.snapshotOf(s.look(now, s.session.Status()))
	waits := make([]time.Duration, len(idx))
	for k, i := range idx {
		waits[k] = max(s.handedOut[i].Sub(now), 0)
	}
	s.signalLocked()
	s.mu.Unlock()
	if s.leaving != "" && s.cfg.ShutdownHandoff == "immediate" && s.withdrawn == "" {
		clear(waits)
	}
	return waits
}

func (s *Set) shardLease(i int, now time.Time) *coordinationv1.Lease {
	sh := &s.shards[i]
	var l *coordinationv1.Lease
	if sh.obs != nil {
		l = sh.obs.DeepCopy()
	} else {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: ShardLeaseName(s.cfg.Name, i), Namespace: s.cfg.Namespace, Labels: s.shardLabels(i)}}
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	secs := int32(s.cfg.LeaseDuration / time.Second)
	t := metav1.NewMicroTime(now)
	l.Spec.LeaseDurationSeconds, l.Spec.AcquireTime, l.Spec.RenewTime = &secs, &t, &t
	return l
}

// nextToken is one above every count seen on shard i (1000 above after a
// deletion found by a relist: counts may have moved unseen).
func (s *Set) nextToken(i int) int64 {
	sh := &s.shards[i]
	n := max(sh.maxSeen, transitionsOf(sh.obs)) + 1
	if sh.obs == nil && sh.unknown {
		n += 1000
	}
	return n
}

func setCount(l *coordinationv1.Lease, n int64) bool {
	if n > math.MaxInt32 {
		return false
	}
	c := int32(n)
	l.Spec.LeaseTransitions = &c
	return true
}

func setJSON(l *coordinationv1.Lease, key string, v any) {
	b, _ := json.Marshal(v)
	l.Annotations[key] = string(b)
}

// takeWrite takes shard i for our term (rule 4), or re-takes our own.
func (s *Set) takeWrite(i int, v *view, reason string) *write {
	now := v.now
	l := s.shardLease(i, now)
	n := s.nextToken(i)
	if !setCount(l, n) {
		return &write{shard: i, what: "skip"}
	}
	id := s.cfg.Identity
	l.Spec.HolderIdentity = &id
	setJSON(l, SessionAnnotation, v.self)
	delete(l.Annotations, MoveAnnotation)
	s.shards[i].pending = n
	return &write{shard: i, lease: l, create: s.shards[i].obs == nil, what: "take", reason: reason}
}

// putBack recreates deleted shard i as last seen (no new term), so a member
// that never saw it finds its holder and count instead of starting over.
func (s *Set) putBack(i int) *write {
	sh := &s.shards[i]
	l := sh.prev.DeepCopy()
	l.ResourceVersion, l.UID, l.ManagedFields = "", "", nil
	n := max(sh.maxSeen, transitionsOf(l))
	if sh.unknown {
		n += 1000
	}
	if !setCount(l, n) {
		return &write{shard: i, what: "skip"}
	}
	return &write{shard: i, lease: l, create: true, what: "put back"}
}

// moveWrite hands shard i (ours) to member to in term ref, or frees it
// (to ""), with the record of rule 2.
func (s *Set) moveWrite(i int, to string, ref SessionRef, wait time.Duration, reason string, now time.Time) *write {
	sh := &s.shards[i]
	l := s.shardLease(i, now)
	if !setCount(l, s.nextToken(i)) {
		return &write{shard: i, what: "skip"}
	}
	// The validity a move before ours still owes is owed on (rule 2).
	wait = max(wait, s.owedUntil(sh).Sub(now))
	ms := int64((wait + time.Millisecond - 1) / time.Millisecond)
	setJSON(l, MoveAnnotation, MoveRecord{From: s.cfg.Identity, Token: transitionsOf(sh.obs), WaitMs: ms, Reason: reason, Leaving: s.leaving != ""})
	if to == "" {
		l.Spec.HolderIdentity = nil
		delete(l.Annotations, SessionAnnotation)
		return &write{shard: i, lease: l, what: "free", reason: reason}
	}
	l.Spec.HolderIdentity = &to
	setJSON(l, SessionAnnotation, ref)
	return &write{shard: i, lease: l, what: "give", reason: reason, to: to}
}

// endWrite ends a member's session term that went unrenewed for a lease
// duration (rule 4): a compare-and-swap on the version we waited on.
func (s *Set) endWrite(m *member) *write {
	s.log.Debug("ending a session term", "lease", m.obs.Name, "rv", m.obs.ResourceVersion, "unchangedFor", s.clock.Since(m.obsTime))
	l := m.obs.DeepCopy()
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	setJSON(l, EndedAnnotation, EndRecord{Term: transitionsOf(l), By: s.cfg.Identity})
	l.Spec.HolderIdentity = nil
	return &write{shard: -1, member: m, lease: l, what: "end"}
}

// readSession settles a session term we did not see (rule 4): a fresh read
// of its Lease either shows the term (then it is judged as any other), or
// shows that the term was over before the read, so its holder's validity
// ends within a lease duration of it.
func (s *Set) readSession(ctx context.Context, ref SessionRef) {
	got, err := s.leases.Get(ctx, ref.Lease, metav1.GetOptions{})
	now := s.clock.Now()
	switch {
	case err == nil:
		s.observe(got, false, false, now)
	case apierrors.IsNotFound(err):
	default:
		for i := range s.shards {
			if r, ok := sessionOf(s.shards[i].obs); ok && r == ref {
				s.shards[i].retryAt = now.Add(s.cfg.RetryPeriod)
			}
		}
		return
	}
	m := s.member(ref.Lease, now)
	if _, ok := m.ended[ref]; !ok && m.cur != ref {
		m.ended[ref] = ending{at: now, wait: max(s.cfg.LeaseDuration, durationOf(got))}
	}
}

// release is POST /release?shard=i: hand shard i to the live member
// holding the fewest (ourselves with a new token when alone).
func (s *Set) release(ctx context.Context, i int) error {
	now := s.clock.Now()
	v := s.look(now, s.session.Status())
	sh := &s.shards[i]
	if !s.ours(sh, v.self, now) {
		return ErrNotHeld
	}
	held := map[string]int{}
	for _, o := range v.owner {
		held[o]++
	}
	to := ""
	for _, id := range v.members {
		if id != s.cfg.Identity && (to == "" || held[id] < held[to]) {
			to = id
		}
	}
	var w *write
	if to == "" {
		sh.giving = true
		s.stopServing(nil, now)
		w = s.takeWrite(i, &v, ReasonReleased)
	} else {
		s.stopServing([]int{i}, now)
		w = s.moveWrite(i, to, s.members[v.byID[to]].cur, 0, ReasonReleased, now)
	}
	s.send(ctx, []*write{w})
	return w.err
}
