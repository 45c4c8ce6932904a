package election

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// The direct handoff (handoff.go), stepped: each rule has a test that
// fails when the rule is removed.

func direct(c *Config) { c.DirectHandoff = true }

// handoffTrio starts a, b and c with DirectHandoff on a free Lease at count
// 1: each announces itself, a takes the Lease (token 2), b and c see it.
func handoffTrio(t *testing.T, cfg func(*Config)) (api *fakeAPI, a, b, c *stepped) {
	t.Helper()
	api = newFakeAPI(t, heldLease("", 1))
	api.mutate = func(cf *Config) {
		direct(cf)
		if cfg != nil {
			cfg(cf)
		}
	}
	a = api.stepped("a").seesStored()
	a.step()
	api.clock.Step(time.Millisecond) // announcements in order: a, b, c
	b = api.stepped("b").seesStored()
	api.catchUp(b)
	b.step()
	api.clock.Step(time.Millisecond)
	c = api.stepped("c").seesStored()
	api.catchUp(c)
	c.step()
	wantCalls(t, api, "each candidate announces itself once", "patch", "patch", "patch")
	api.waitOutFreeLease()
	api.catchUp(a)
	a.step()
	wantCalls(t, api, "a takes the free Lease", "update")
	wantLeads(t, a, 2)
	api.catchUp(b, c)
	return api, a, b, c
}

func TestReleaseHandsTheLeaseToTheNewestAnnouncedCandidateWhichServesOnlyAfterItsOwnWrite(t *testing.T) {
	api, a, b, c := handoffTrio(t, nil)
	log := newTokenLog(t)
	log.check(a, b, c)
	if err := a.releaseFor(context.Background(), 0, "released on request"); err != nil {
		t.Fatal(err)
	}
	log.gaveBack(a)
	wantCalls(t, api, "a's one write hands the Lease over", "update")
	l := api.lease()
	if holderOf(l) != "c" || transitionsOf(l) != 3 || !handoffPending(l) || incarnationOf(l) != c.st.incarnation {
		t.Fatalf("after a's handoff the Lease is %+v %v; want held by c (announced last) with c's mark, count 3, a handoff record", l.Spec, l.Annotations)
	}
	if _, ok := announcement(l, "a"); ok {
		t.Fatal("the giver's own announcement stays on the Lease: the next leader could hand back to it during its hold-off")
	}
	api.catchUp(b, c)
	log.check(a, b, c)
	if c.Status().IsLeader {
		t.Fatal("c serves a token it has not written itself: its validity would start before it knows when")
	}
	b.step()
	wantCalls(t, api, "b leaves the handoff to c")
	sent := api.clock.Now()
	c.step()
	wantCalls(t, api, "c accepts with one write", "update")
	wantLeads(t, c, 3)
	if !c.st.term.lastRenew.Equal(sent) {
		t.Fatalf("c's validity starts at %v, want its accepting write's send time %v", c.st.term.lastRenew, sent)
	}
	if l := api.lease(); handoffPending(l) || !heldBy(l, "c", c.st.incarnation) {
		t.Fatalf("accepted Lease %+v %v: want c's term and no handoff record", l.Spec, l.Annotations)
	}
	runFor(api, log, 2*ld, a, b, c)
	wantLeads(t, c, 3)
}

// A successor that never accepts (dead, paused, partitioned): the others
// take the Lease after a retry period, not a lease duration; if the
// successor wakes and tries to accept, the compare-and-swap refuses it.
func TestAHandoffNotAcceptedWithinARetryPeriodIsTakenByAnotherFollower(t *testing.T) {
	api, a, b, c := handoffTrio(t, nil)
	log := newTokenLog(t)
	if err := a.releaseFor(context.Background(), 0, "released on request"); err != nil {
		t.Fatal(err)
	}
	log.gaveBack(a)
	api.calls()
	api.catchUp(b) // c is paused: it does not see the handoff
	b.step()
	wantCalls(t, api, "b first leaves the handoff to c")
	runFor(api, log, rp+100*time.Millisecond, a, b)
	wantLeads(t, b, 4)
	if _, ok := announcement(api.lease(), "c"); ok {
		t.Fatal("b kept the announcement of the successor that never accepted")
	}
	c.sees(mustHandoff(t, api, a)) // c wakes with the handoff it missed
	c.step()
	if c.Status().IsLeader {
		t.Fatalf("c accepted a handoff another follower had taken: %+v", c.Status())
	}
	runFor(api, log, 2*ld, a, b, c)
	wantLeads(t, b, 4)
}

// mustHandoff rebuilds the handoff a wrote (the version c missed): held by
// c, count 3, a's record, at the resourceVersion it had.
func mustHandoff(t *testing.T, api *fakeAPI, a *stepped) *coordinationv1.Lease {
	t.Helper()
	l := api.lease().DeepCopy()
	l.Spec.HolderIdentity = ptr("c")
	l.Spec.LeaseTransitions = ptr(int32(3))
	markHandoff(l, CandidateRecord{Identity: "c", Incarnation: "c-mark"}, a.st.incarnation, 2, 0)
	l.ResourceVersion = "1" // older than anything stored: a stale event
	return l
}

// A Lease that carries a handoff record nobody saw being written (found at
// start, restored, or edited by hand) is waited out like a held one: its
// previous holder may still serve.
func TestAHandoffRecordNotSeenReplacingItsTermIsWaitedOutLikeAHeldLease(t *testing.T) {
	api := newFakeAPI(t, heldLease("ghost", 7))
	api.handEdit(func(l *coordinationv1.Lease) {
		setAnnotation(l, IncarnationAnnotation, "ghost-mark")
		markHandoff(l, CandidateRecord{Identity: "ghost", Incarnation: "ghost-mark"}, "earlier-mark", 6, 0)
	})
	api.mutate = direct
	n := api.stepped("n").seesStored()
	log := newTokenLog(t)
	runFor(api, log, ld-rp, n)
	if n.Status().IsLeader {
		t.Fatal("n took a Lease with an unseen handoff record before a lease duration")
	}
	runFor(api, log, 2*rp, n)
	wantLeads(t, n, 8)
}

// A handoff when the giver's app still holds validity (SIGTERM with
// after-validity, an unhealthy app): the successor accepts no earlier than
// that validity plus the skew margin after it saw the handoff.
func TestTheSuccessorAcceptsOnlyAfterTheValidityTheGiversAppHolds(t *testing.T) {
	api, a, b, c := handoffTrio(t, nil)
	log := newTokenLog(t)
	api.clock.Step(rp / 2)
	log.check(a, b, c)
	promised := api.clock.Now().Add(a.Status().ExpiresIn)
	if err := a.setCandidate(context.Background(), false, "app unhealthy"); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, api, "a hands off", "update")
	api.catchUp(b, c)
	c.step()
	wantCalls(t, api, "c waits for a's app's validity")
	runFor(api, log, 2*ld, a, b, c)
	wantLeads(t, c, 3)
	if first := c.st.term.lastRenew; first.Before(promised.Add(skew)) {
		t.Fatalf("c accepted %v before a's answer ran out (plus the margin)", promised.Add(skew).Sub(first))
	}
}

// Found by the simulator (seed 6020): a follower with an earlier release
// that failed (unreleased) is handed the Lease with a wait; stepping down
// before it accepts, it must not treat the handoff as its own ended term
// (it would hand the Lease on with no wait while the giver's app still
// holds validity).
func TestAHandoffToUsIsNotOurTermToReleaseBeforeWeAcceptIt(t *testing.T) {
	api, a, b, c := handoffTrio(t, nil)
	log := newTokenLog(t)
	api.clock.Step(rp / 2)
	log.check(a, b, c)
	if err := a.setCandidate(context.Background(), false, "app unhealthy"); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, api, "a hands off to c with a wait", "update")
	api.catchUp(b, c)
	// c once failed to release an earlier term on this Lease.
	c.st.unreleased, c.st.lastToken, c.st.lastTermUID = true, 1, uidOf(api.lease())
	if err := c.setCandidate(context.Background(), false, "app unhealthy"); err != nil {
		t.Fatal(err)
	}
	if calls := api.calls(); len(calls) > 0 && calls[0] == "update" {
		t.Fatalf("c, not yet leader, wrote the Lease when stepping down: calls %v", calls)
	}
	runFor(api, log, 3*ld, a, b, c)
	wantLeads(t, b, 4)
}

// Found by the simulator (seed 5071): the acceptance removes the handoff
// record, so a follower that missed the handoff and sees the accepted
// version waits out the new term like any held Lease.
func TestTheAcceptanceRemovesTheHandoffRecord(t *testing.T) {
	api, a, b, c := handoffTrio(t, nil)
	log := newTokenLog(t)
	if err := a.releaseFor(context.Background(), 0, "released on request"); err != nil {
		t.Fatal(err)
	}
	log.gaveBack(a)
	api.catchUp(c)
	c.step()
	wantLeads(t, c, 3)
	api.calls()
	api.catchUp(b) // b saw a's term, then (watch gap) the accepted version
	if b.st.handoffSeen {
		t.Fatal("b takes c's accepted term for a pending handoff")
	}
	runFor(api, log, 2*ld, a, b, c)
	wantLeads(t, c, 3)
}

// With no other candidate announced, stepping down writes a release as
// without the direct handoff.
func TestWithNoAnnouncedCandidateAStepDownReleases(t *testing.T) {
	api := newFakeAPI(t, heldLease("", 1))
	api.mutate = func(c *Config) { c.DirectHandoff = c.Identity == "a" }
	a := api.stepped("a").seesStored()
	b := api.stepped("b").seesStored()
	api.waitOutFreeLease()
	api.catchUp(a)
	a.step()
	wantCalls(t, api, "a announces itself and takes the free Lease", "patch", "update")
	api.catchUp(b)
	if err := a.releaseFor(context.Background(), 0, "released on request"); err != nil {
		t.Fatal(err)
	}
	l := api.lease()
	if holderOf(l) != "" || handoffPending(l) || annotation(l, ReleasedAnnotation) == "" {
		t.Fatalf("after a's step-down with nobody announced: %+v %v; want a release", l.Spec, l.Annotations)
	}
	api.catchUp(b)
	b.step()
	wantLeads(t, b, 3)
}

// A follower announces itself once, takes the announcement back when it
// leaves the election and at shutdown, and two processes with one identity
// overwrite each other's at most once per lease duration.
func TestAnnouncementsAreOnePatchPerChangeAndTwinsDoNotLoop(t *testing.T) {
	api, a, b, _ := handoffTrio(t, nil)
	runFor(api, newTokenLog(t), 3*ld, a, b)
	for _, v := range api.calls() {
		if v != "update" {
			t.Fatalf("steady state made %v calls; want only a's renews", api.calls())
		}
	}
	if err := b.setCandidate(context.Background(), false, "app unhealthy"); err != nil {
		t.Fatal(err)
	}
	b.step()
	wantCalls(t, api, "b takes its announcement back", "patch")
	if _, ok := announcement(api.lease(), "b"); ok {
		t.Fatal("b's announcement stays while it is out of the election")
	}
	if err := b.setCandidate(context.Background(), true, "app healthy"); err != nil {
		t.Fatal(err)
	}
	runFor(api, newTokenLog(t), ld+rp, a, b) // the announcements' rate limit
	if calls := api.calls(); countOf(calls, "patch") != 1 {
		t.Fatalf("b back in the election: calls %v, want one patch (and a's renews)", calls)
	}
	b2 := api.stepped("b").seesStored() // a twin
	runFor(api, newTokenLog(t), 4*ld, a, b, b2)
	patches := countOf(api.calls(), "patch")
	if limit := 2 * (4 + 1); patches > limit {
		t.Fatalf("twins patched their announcement %d times in 4 lease durations; want at most %d", patches, limit)
	}
	if err := b.shutdownRelease(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestSuccessorIsTheNewestAnnouncementOfAnotherIdentity(t *testing.T) {
	l := &coordinationv1.Lease{}
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	for i, id := range []string{"x", "self", "y", "z"} {
		setAnnotation(l, candidateKey(id), candidateValue(id, id+"-mark", t0.Add(time.Duration(i)*time.Second)))
	}
	setAnnotation(l, candidateKey("w"), `{"identity":"not-w","incarnation":"m","since":"2030-01-01T00:00:00Z"}`) // key and identity differ
	setAnnotation(l, CandidateAnnotationPrefix+"junk", "{")
	got, ok := successor(l, "z")
	if !ok || got.Identity != "y" || got.Incarnation != "y-mark" {
		t.Fatalf("successor = %+v, %v; want y (newest but self)", got, ok)
	}
	if _, ok := successor(&coordinationv1.Lease{}, "z"); ok {
		t.Fatal("a successor on a Lease with no announcement")
	}
}

func countOf(calls []string, verb string) int {
	n := 0
	for _, v := range calls {
		if v == verb {
			n++
		}
	}
	return n
}
