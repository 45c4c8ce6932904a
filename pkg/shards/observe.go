package shards

import (
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/tools/cache"
)

// event is one watch event of the set, queued for the loop in order.
type event struct {
	lease   *coordinationv1.Lease
	deleted bool
	unknown bool // a deletion found by a relist
	synced  bool // marker: a (re)list has been queued
}

// setStore is the reflector's store for the set's one watch: it passes
// every event to the session's candidate (which keeps its own Lease) and
// queues it for the loop. The reflector calls it from one goroutine.
type setStore struct {
	s       *Set
	session cache.ReflectorStore
	last    map[string]*coordinationv1.Lease
	synced  bool
}

func (st *setStore) Add(obj any) error    { return st.Update(obj) }
func (st *setStore) Resync() error        { return nil }
func (st *setStore) Update(obj any) error { st.put(obj, false, false); return st.session.Update(obj) }
func (st *setStore) Delete(obj any) error { st.put(obj, true, false); return st.session.Delete(obj) }

// Replace is a (re)list: every Lease of the set as it now is, and the
// deletion of each one known before that the list lacks.
func (st *setStore) Replace(list []any, rv string) error {
	seen := make(map[string]bool, len(list))
	for _, obj := range list {
		if l, ok := obj.(*coordinationv1.Lease); ok {
			seen[l.Name] = true
			st.put(l, false, false)
		}
	}
	for name, l := range st.last {
		if !seen[name] {
			st.put(l, true, true)
		}
	}
	// Every list marks a gap in what we saw (the initial list first).
	st.synced = true
	st.s.deliver(event{synced: true})
	return st.session.Replace(list, rv)
}

func (st *setStore) put(obj any, deleted, unknown bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted, unknown = d.Obj, true, true
	}
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	if st.last == nil {
		st.last = map[string]*coordinationv1.Lease{}
	}
	if deleted {
		delete(st.last, l.Name)
	} else {
		st.last[l.Name] = l
	}
	st.s.deliver(event{lease: l, deleted: deleted, unknown: unknown})
}

// deliver queues an event and wakes the loop.
func (s *Set) deliver(ev event) {
	s.inboxMu.Lock()
	s.inbox = append(s.inbox, ev)
	s.inboxMu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *Set) drainInbox() {
	s.inboxMu.Lock()
	queue := s.inbox
	s.inbox = nil
	s.inboxMu.Unlock()
	now := s.clock.Now()
	for _, ev := range queue {
		switch {
		case ev.synced:
			// A shard never seen may have lived and gone in the gap a
			// list covers: its wait starts again (takeAt).
			s.synced, s.syncedAt = true, now
			s.setExisted = s.anyShardSeen()
		default:
			s.observe(ev.lease, ev.deleted, ev.unknown, now)
		}
	}
}

// observe applies one version (or deletion) of a Lease of the set.
func (s *Set) observe(l *coordinationv1.Lease, deleted, unknown bool, now time.Time) {
	if i, ok := shardIndex(s.cfg.Name, s.cfg.Shards, l); ok {
		s.observeShard(&s.shards[i], l, deleted, unknown, now)
		return
	}
	if l.Labels[RoleLabel] != RoleMember {
		return
	}
	s.observeMember(s.member(l.Name, now), l, deleted, unknown, now)
}

// member is session Lease name's record, created (first seen now) if new.
func (s *Set) member(name string, now time.Time) *member {
	m := s.members[name]
	if m == nil {
		m = &member{ended: map[SessionRef]ending{}}
		m.firstObs = now
		s.members[name] = m
	}
	return m
}

// see records a new version (nil: deleted) of v; false: nothing changed.
func (v *leaseView) see(l *coordinationv1.Lease, deleted, unknown bool, now time.Time) bool {
	if v.firstObs.IsZero() {
		v.firstObs = now
	}
	if deleted {
		if v.obs == nil || older(l, v.obs) {
			return false // gone already, or an object a fresh read found replaced
		}
		// The deleted object's final state, when the event has a newer
		// one than we saw (it is what a put-back restores).
		last := v.obs
		if !unknown && l.UID == v.obs.UID && older(v.obs, l) {
			last = l
		}
		v.prev, v.obs, v.deletedAt, v.obsTime = last, nil, now, now
		v.maxSeen = max(v.maxSeen, transitionsOf(last))
		v.unknown = v.unknown || unknown
		return true
	}
	if v.obs != nil && (v.obs.ResourceVersion == l.ResourceVersion || older(l, v.obs)) {
		return false // the same, or an event a fresh read already passed
	}
	if v.obs == nil || v.obs.UID != l.UID {
		v.newAt = now
	}
	v.prev, v.obs, v.obsTime, v.deletedAt, v.unknown = v.obs, l, now, time.Time{}, false
	v.maxSeen = max(v.maxSeen, transitionsOf(l))
	return true
}

// older: l's resourceVersion is below cur's (etcd's revisions; a version
// read with Get may arrive before the watch events it passed).
func older(l, cur *coordinationv1.Lease) bool {
	a, err1 := strconv.ParseInt(l.ResourceVersion, 10, 64)
	b, err2 := strconv.ParseInt(cur.ResourceVersion, 10, 64)
	return err1 == nil && err2 == nil && a < b
}

func (s *Set) observeShard(sh *shard, l *coordinationv1.Lease, deleted, unknown bool, now time.Time) {
	if !sh.see(l, deleted, unknown, now) {
		return
	}
	sh.giving = false
	sh.confirmed = time.Time{} // a new version: confirmed by our write, or by the next list
	if deleted {
		return
	}
	sh.wait = s.serveWait(sh)
	if holderOf(l) == s.cfg.Identity {
		s.confirmAt = time.Time{} // ours now, perhaps: confirm it at once
	}
	if r, ok := moved(sh.prev, l); ok && r.Leaving {
		// Its giver leaves: no shard is planned for it in that term.
		if ref, ok := sessionOf(sh.prev); ok {
			if m := s.members[ref.Lease]; m != nil {
				m.leaving = ref
			}
		}
	}
	if r, ok := moved(sh.prev, l); ok && holderOf(l) == s.cfg.Identity {
		s.metrics.moves.WithLabelValues("in", r.Reason).Inc()
	}
}

// serveWait is rule 3: how long after seeing sh's version the member it
// names may serve it.
func (s *Set) serveWait(sh *shard) time.Duration {
	l := sh.obs
	if sh.pending > 0 && transitionsOf(l) == sh.pending && holderOf(l) == s.cfg.Identity {
		sh.pending = 0
		return 0 // our own take, whose answer was lost
	}
	if r, ok := moved(sh.prev, l); ok {
		w := time.Duration(r.WaitMs) * time.Millisecond
		if w > 0 {
			w += s.cfg.ClockSkewMargin
		}
		return w
	}
	return max(s.cfg.LeaseDuration, durationOf(l))
}

func (s *Set) observeMember(m *member, l *coordinationv1.Lease, deleted, unknown bool, now time.Time) {
	if !m.see(l, deleted, unknown, now) {
		return
	}
	var next SessionRef
	if !deleted {
		next = termOf(l)
	}
	if next == m.cur {
		return
	}
	if m.cur != (SessionRef{}) {
		e := ending{at: now, wait: max(s.cfg.LeaseDuration, durationOf(m.prev))}
		if !deleted && endedTerm(m.prev, l) {
			e = ending{at: now, proven: true}
		}
		m.ended[m.cur] = e
	}
	m.cur = next
}
