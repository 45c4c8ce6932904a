package shards

// Scripted scenarios for the rules the random simulator does not single
// out (defense in depth: with one of them removed its invariants still
// hold on the seeds it draws, docs/simulation.md). Each test fails when
// its rule is removed.

import (
	"testing"
	"time"
)

// settled is a quiet world of n members that has converged.
func settled(t *testing.T, n int) *simWorld {
	t.Helper()
	w := quietWorld(n)
	w.run(20*time.Second, time.Hour)
	if why := w.fairNow(); why != "" {
		t.Fatalf("not settled: %s", why)
	}
	return w
}

// tokenServed is the token p serves for shard i (0: none).
func tokenServed(p *simProc, i int) int64 {
	for _, o := range p.set.Status().Owned {
		if o.Index == i {
			return o.Token
		}
	}
	return 0
}

func checkNoViolation(t *testing.T, w *simWorld) {
	t.Helper()
	if w.chk.failed() {
		t.Fatal(w.chk.errs[0])
	}
}

// Rule 5: a member that saw a shard's Lease deleted puts it back at once,
// as it was, so the count survives even when its holder and everyone who
// saw it are gone before anyone takes the shard.
func TestADeletedShardIsPutBackWithItsCountSoAMemberThatNeverSawItGoesOnAboveIt(t *testing.T) {
	w := settled(t, 2)
	a, b := w.procs[0], w.procs[1]
	i := a.set.peek()[0]
	name := ShardLeaseName(w.cfg.Name, i)
	served := transitionsOf(w.srv.leases[name])
	// Its holder crashes, then the Lease is deleted: only b saw it.
	a.dead = true
	_ = w.srv.delete(name, nil, "adversary")
	w.run(w.now+w.cfg.RetryPeriod, time.Hour)
	if l := w.srv.leases[name]; l == nil || transitionsOf(l) < served {
		t.Fatalf("b did not put shard %d back with its count %d within a retry period: %s", i, served, describe(l))
	}
	// b crashes well before it would take the shard for itself; c never
	// saw the set.
	b.dead = true
	c := w.start("c")
	w.run(w.now+10*w.cfg.LeaseDuration, time.Hour)
	checkNoViolation(t, w)
	if why := w.fairNow(); why != "" {
		t.Fatalf("c did not take over: %s", why)
	}
	if got := tokenServed(c, i); got <= served {
		t.Fatalf("c serves shard %d with token %d, not above %d served before its Lease was deleted", i, got, served)
	}
}

// Rule 6: a member that left leaves its session Lease behind; the first
// live member deletes it once no shard names it and it went unwritten for
// three lease durations (a member whose term was ended may still come
// back to it before that).
func TestTheSessionLeaseOfAMemberThatLeftIsDeletedThreeLeaseDurationsAfterItsLastWriteNotBefore(t *testing.T) {
	w := settled(t, 3)
	c := w.procs[2]
	session := MemberLeaseName(w.cfg.Name, c.id)
	c.dead = true
	d := w.cfg.LeaseDuration
	w.run(w.now+3*d, time.Hour)
	for name, l := range w.srv.leases {
		if ref, ok := sessionOf(l); ok && ref.Lease == session {
			t.Fatalf("%s still names c's session %v after its crash", name, 3*d)
		}
	}
	var last time.Duration
	for _, x := range w.srv.log {
		if x.name == session && x.lease != nil {
			last = x.at
		}
	}
	w.run(last+3*d-time.Millisecond, time.Hour)
	if w.srv.leases[session] == nil {
		t.Fatalf("c's session Lease deleted before three lease durations (last written at %.3fs, now %.3fs)", last.Seconds(), w.now.Seconds())
	}
	w.run(last+3*d+2*w.cfg.RetryPeriod, time.Hour)
	if l := w.srv.leases[session]; l != nil {
		t.Fatalf("c's session Lease still there three lease durations and two retry periods after its last write: %s", describe(l))
	}
	checkNoViolation(t, w)
}

// Rule 4, its last sentence: a shard Lease recreated (a new UID) may hide
// versions nobody saw, which may owe a validity; it is taken no earlier
// than a lease duration after it was seen, even when the term it names is
// known to be over.
func TestAShardLeaseRecreatedByHandIsTakenNoEarlierThanALeaseDurationAfterItWasSeen(t *testing.T) {
	w := settled(t, 3)
	c := w.procs[2]
	j := c.set.peek()[0]
	name := ShardLeaseName(w.cfg.Name, j)
	old := w.srv.leases[name].DeepCopy() // names c's term
	c.dead = true
	d := w.cfg.LeaseDuration
	w.run(w.now+3*d, time.Hour)
	cur := w.srv.leases[name]
	if holderOf(cur) == c.id {
		t.Fatalf("shard %d still held by the crashed c: %s", j, describe(cur))
	}
	// By hand: deleted and recreated as it was in c's term (which the
	// others saw ended), with a higher count and no move record.
	l := old.DeepCopy()
	l.ResourceVersion, l.UID = "", ""
	delete(l.Annotations, MoveAnnotation)
	setCount(l, transitionsOf(cur)+1)
	_ = w.srv.delete(name, nil, "adversary")
	created, err := w.srv.create(l, "adversary")
	if err != nil {
		t.Fatal(err)
	}
	at := w.now
	w.run(at+d-time.Millisecond, time.Hour)
	for _, x := range w.srv.log {
		if x.name == name && x.at > at && x.writer != "adversary" {
			t.Fatalf("shard %d's recreated Lease written by %s %v after it was recreated, before a lease duration (%v): %s",
				j, x.writer, x.at-at, d, describe(x.lease))
		}
	}
	w.run(at+d+2*w.cfg.RetryPeriod, time.Hour)
	checkNoViolation(t, w)
	now := w.srv.leases[name]
	if holderOf(now) == c.id || transitionsOf(now) <= transitionsOf(created) {
		t.Fatalf("shard %d not taken a lease duration after it was recreated: %s", j, describe(now))
	}
}
