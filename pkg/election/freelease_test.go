package election

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The second safety review's findings (N1-N6), stepped: a free Lease is
// not a release unless its holder's own release was seen, a UID change
// waits like a deletion, a term belongs to one process, an exhausted count
// says why and recovers, and a release keeps the validity the app holds.

// seesDeletedByRelist hands the candidate a deletion found by a relist
// after a watch gap (DeletedFinalStateUnknown): last is the version it
// knew, not necessarily the one deleted.
func (c *stepped) seesDeletedByRelist(last *coordinationv1.Lease) *stepped {
	c.deliver(observation{lease: last.DeepCopy(), deleted: true, unknown: true})
	c.drainInbox()
	c.publish()
	return c
}

// runFor steps every candidate (each after catching up with the stored
// Lease) every 50 ms of fake time for d, checking the token's promises.
func runFor(api *fakeAPI, log *tokenLog, d time.Duration, cands ...*stepped) {
	api.t.Helper()
	for moved := time.Duration(0); moved < d; moved += 50 * time.Millisecond {
		api.catchUp(cands...)
		for _, c := range cands {
			c.step()
			log.check(cands...)
		}
		api.clock.Step(50 * time.Millisecond)
	}
}

// leaderOf returns the candidate that leads, nil if none.
func leaderOf(cands ...*stepped) *stepped {
	for _, c := range cands {
		if c.Status().IsLeader {
			return c
		}
	}
	return nil
}

// aLeadsBFollows starts a and b on a free Lease at count 1 (cfg: each
// candidate's Config edit, or nil), lets a take it (token 2) and b see it.
func aLeadsBFollows(t *testing.T, cfg func(*Config)) (api *fakeAPI, a, b *stepped) {
	t.Helper()
	api = newFakeAPI(t, heldLease("", 1))
	api.mutate = cfg
	a = api.stepped("a").seesStored()
	b = api.stepped("b").seesStored()
	api.waitOutFreeLease()
	a.step()
	wantCalls(t, api, "a takes the free Lease", "update")
	api.catchUp(b)
	return api, a, b
}

// N1: a follower learns of a deletion from a relist that reports the last
// version it had (free, count 5) while b holds token 6 on the deleted
// Lease. The follower restores what it knew; a newcomer finds a free Lease.
// Neither may reissue 6 (nor serve while b does).
func TestStaleFreeRestoreAfterARelistNeverReissuesAToken(t *testing.T) {
	api := newFakeAPI(t, heldLease("", 5))
	f := api.stepped("f").seesStored()
	b := api.stepped("b").seesStored()
	before := api.lease()
	api.waitOutFreeLease()
	b.step()
	wantCalls(t, api, "b takes the free Lease", "update")
	wantLeads(t, b, 6)

	api.deleteLease()
	f.seesDeletedByRelist(before)
	f.step()
	wantCalls(t, api, "f restores the Lease it knew", "create")
	if l := api.lease(); holderOf(l) != "" || transitionsOf(l) <= 6 || annotation(l, ReleasedAnnotation) != "" {
		t.Fatalf("restored %+v (annotations %v): want free, a count above any unseen token, no release record", l.Spec, l.Annotations)
	}
	n := api.stepped("n").seesStored()
	log := newTokenLog(t)
	n.step()
	wantCalls(t, api, "the newcomer waits the free Lease out")
	b.cuttable().cut.Store(true) // b sees nothing more: it serves 6 until its renew deadline
	runFor(api, log, 3*ld, f, b, n)
	if l := leaderOf(f, n); l == nil || l.Status().Token <= 6 {
		t.Fatalf("after %v: leader %v; want f or n with a token above 6", 3*ld, l)
	}
}

// N2: the Lease is deleted and created again free by another client; a
// follower's relist finds only the new UID (no deletion event). It waits
// as after a deletion: the old leader may still serve.
func TestLeaseRecreatedFreeIsWaitedOutLikeADeletion(t *testing.T) {
	api, a, b := aLeadsBFollows(t, nil)
	a.cuttable().cut.Store(true)

	api.deleteLease()
	fresh := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: leaseName, Namespace: ns},
		Spec:       coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr(int32(3))},
	}
	if _, err := api.client.CoordinationV1().Leases(ns).Create(context.Background(), fresh, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	api.calls()
	api.catchUp(b)
	if b.st.notBefore.Before(api.clock.Now().Add(ld)) {
		t.Fatalf("b's notBefore %v after seeing a new UID, want a lease duration from now", b.st.notBefore.Sub(api.clock.Now()))
	}
	log := newTokenLog(t)
	runFor(api, log, 3*ld, a, b)
	if !b.Status().IsLeader || b.Status().Token <= 2 {
		t.Fatalf("b: %+v, want leading with a token above a's 2", b.Status())
	}
}

// N3: holderIdentity cleared by hand is not a release: followers wait until
// the holder's term has expired on their clock.
func TestLeaseFreedByHandIsWaitedOutUntilItsHolderStops(t *testing.T) {
	api, a, b := aLeadsBFollows(t, nil)
	log := newTokenLog(t)
	log.check(a, b)
	a.cuttable().cut.Store(true)
	api.handEdit(func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = nil })
	api.catchUp(b)
	if b.st.releaseSeen {
		t.Fatal("a hand-cleared holder was taken for a release")
	}
	b.step()
	wantCalls(t, api, "b waits")
	runFor(api, log, 3*ld, a, b)
	wantLeads(t, b, 3)
}

// A free version that copies a release record but does not follow the term
// it names (same UID, same process, same count) is no release either.
func TestReleaseRecordOnlyCountsRightAfterTheTermItNames(t *testing.T) {
	held := heldLease("a", 4)
	setAnnotation(held, IncarnationAnnotation, "inc-a")
	free := held.DeepCopy()
	free.Spec.HolderIdentity = nil
	markReleased(free, 4, "inc-a", 0)
	if _, ok := released(held, free); !ok {
		t.Fatal("the holder's own release was not recognised")
	}
	for name, edit := range map[string]func(prev, l *coordinationv1.Lease){
		"another process":  func(_, l *coordinationv1.Lease) { markReleased(l, 4, "inc-twin", 0) },
		"another count":    func(_, l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr(int32(5)) },
		"another Lease":    func(_, l *coordinationv1.Lease) { l.UID = "uid-2" },
		"after a free one": func(prev, _ *coordinationv1.Lease) { prev.Spec.HolderIdentity = nil },
		"no record":        func(_, l *coordinationv1.Lease) { delete(l.Annotations, ReleasedAnnotation) },
		"a garbled record": func(_, l *coordinationv1.Lease) { setAnnotation(l, ReleasedAnnotation, "{") },
		"still held":       func(_, l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr("a") },
		"a negative wait": func(_, l *coordinationv1.Lease) {
			setAnnotation(l, ReleasedAnnotation, `{"token":4,"incarnation":"inc-a","waitMs":-1}`)
		},
		"the term's unnamed": func(prev, _ *coordinationv1.Lease) { delete(prev.Annotations, IncarnationAnnotation) },
	} {
		prev, l := held.DeepCopy(), free.DeepCopy()
		edit(prev, l)
		if _, ok := released(prev, l); ok {
			t.Errorf("%s: counted as a release", name)
		}
	}
}

// N4: two processes with one identity. a2's acquire got no answer and did
// not land; a1 holds the term at the count a2 tried. a2's shutdown must not
// release a1's term, and the collision is reported.
func TestTwinNeverReleasesTheOtherTwinsTermAndTheCollisionIsReported(t *testing.T) {
	api := newFakeAPI(t, heldLease("", 1))
	a1 := api.stepped("a").seesStored()
	a2 := api.stepped("a").seesStored()
	b := api.stepped("b").seesStored()
	api.waitOutFreeLease()
	a1.step()
	wantCalls(t, api, "a1 takes the free Lease", "update")
	cut := a2.cuttable()
	cut.cut.Store(true)
	a2.step() // acquire at count 2; the request never gets an answer
	cut.cut.Store(false)
	if a2.st.pendingToken != 2 {
		t.Fatalf("a2 pendingToken %d", a2.st.pendingToken)
	}
	api.calls()
	// SIGTERM for a2 before its watch shows a1's term: the GET finds "a" at
	// count 2, but not a2's mark.
	if err := a2.shutdownRelease(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, api, "a2's shutdown only reads the Lease", "get")
	api.catchUp(b)
	if l := api.lease(); !heldBy(l, "a", a1.st.incarnation) {
		t.Fatalf("after a2's shutdown the Lease is %+v (%v), want a1's term", l.Spec, l.Annotations)
	}
	log := newTokenLog(t)
	a3 := api.stepped("a").seesStored() // a twin that runs on
	runFor(api, log, rp+100*time.Millisecond, a1, a3, b)
	if s := a3.Status(); !strings.Contains(s.IdentityCollision, "another process with identity \"a\"") {
		t.Fatalf("a3 saw a1 renew the Lease as %q but reports no collision: %+v", "a", s)
	}
	if s := a1.Status(); !s.IsLeader || s.IdentityCollision != "" {
		t.Fatalf("a1: %+v, want leading (it has seen no other writer yet)", s)
	}
	runFor(api, log, 3*ld, a1, a3, b)
	wantLeads(t, a1, 2)
}

// N5: leaseTransitions set to MaxInt32 by hand: every candidate says why it
// cannot lead; lowering the count with a declared reset brings a leader
// back with no restart, while lowering it alone is raised back.
func TestExhaustedCountSaysWhyAndADeclaredResetRecovers(t *testing.T) {
	api, a, b := aLeadsBFollows(t, nil)
	api.handEdit(func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr(int32(math.MaxInt32)) })
	log := newTokenLog(t)
	runFor(api, log, 3*ld, a, b)
	for _, c := range []*stepped{a, b} {
		if s := c.Status(); s.IsLeader || !strings.Contains(s.CannotLead, "2147483647") {
			t.Fatalf("%s: %+v, want not leading and saying why", c.cfg.Identity, s)
		}
	}
	api.handEdit(func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr(int32(10)) })
	runFor(api, log, 2*ld, a, b)
	if l := api.lease(); transitionsOf(l) != math.MaxInt32 {
		t.Fatalf("a count lowered without a declared reset stays lowered: %d", transitionsOf(l))
	}
	api.handEdit(func(l *coordinationv1.Lease) {
		l.Spec.LeaseTransitions = ptr(int32(41))
		setAnnotation(l, TransitionsResetAnnotation, "1")
	})
	runFor(api, log, 3*ld, a, b)
	l := leaderOf(a, b)
	if l == nil || l.Status().Token != 42 || l.Status().CannotLead != "" {
		t.Fatalf("after the reset: leader %v; want one with token 42", l)
	}
}

// N6: a release on SIGTERM (after-validity) keeps the validity the app was
// handed out; a release the app asked for, and an immediate shutdown
// handoff, hand over at once.
func TestReleaseKeepsTheValidityTheAppHoldsUnlessItGaveTheTokenBack(t *testing.T) {
	tests := []struct {
		name     string
		handoff  Handoff
		release  func(c *stepped) error
		gaveBack bool
	}{
		{"SIGTERM, after-validity", HandoffAfterValidity, func(c *stepped) error { return c.shutdownRelease(context.Background()) }, false},
		{"app unhealthy", HandoffImmediate, func(c *stepped) error { return c.setCandidate(context.Background(), false, "app unhealthy") }, false},
		{"POST /release", HandoffAfterValidity, func(c *stepped) error { return c.releaseFor(context.Background(), 0, "released on request") }, true},
		{"SIGTERM, immediate", HandoffImmediate, func(c *stepped) error { return c.shutdownRelease(context.Background()) }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api, a, b := aLeadsBFollows(t, func(c *Config) { c.ShutdownHandoff = tt.handoff })
			log := newTokenLog(t)
			api.clock.Step(rp / 2) // the answer the app holds: a little less than a full term
			log.check(a, b)
			promised := api.clock.Now().Add(a.Status().ExpiresIn)
			if err := tt.release(a); err != nil {
				t.Fatal(err)
			}
			api.calls()
			if tt.gaveBack {
				log.gaveBack(a)
			}
			api.catchUp(b)
			if !b.st.releaseSeen {
				t.Fatal("b did not see a's release")
			}
			b.step()
			if tt.gaveBack {
				wantLeads(t, b, 3)
				return
			}
			wantCalls(t, api, "b waits")
			runFor(api, log, 2*ld, a, b)
			wantLeads(t, b, 3)
			if first := b.st.term.lastRenew; first.Before(promised) {
				t.Fatalf("b took over %v before a's answer ran out", promised.Sub(first))
			}
		})
	}
}

// N8 (found by the simulator): a leader whose valid term is deleted may
// recreate the Lease at once; if it is out of the election by then, it
// restores the Lease instead, so the count outlives its absence and a
// newcomer never starts again at 1.
func TestExLeaderOutOfTheElectionRestoresItsDeletedLease(t *testing.T) {
	api := newFakeAPI(t, heldLease("", 1))
	a := api.stepped("a").seesStored()
	api.waitOutFreeLease()
	a.step()
	wantLeads(t, a, 2)
	last := api.lease()
	api.deleteLease()
	a.seesDeleted(last)
	if err := a.setCandidate(context.Background(), false, "app unhealthy"); err != nil {
		t.Fatal(err)
	}
	api.calls()
	a.step()
	wantCalls(t, api, "a restores the deleted Lease", "create")
	if l := api.lease(); holderOf(l) != "a" || transitionsOf(l) != 2 {
		t.Fatalf("restored %+v, want a's term at count 2", l.Spec)
	}
	n := api.stepped("n").seesStored()
	log := newTokenLog(t)
	runFor(api, log, 3*ld, a, n)
	wantLeads(t, n, 3)
}
