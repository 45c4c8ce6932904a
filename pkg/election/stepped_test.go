package election

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// These tests drive candidates one step at a time on a fake clock, with no
// goroutines: the test delivers each informer event and asserts the exact
// API calls each step makes.

// cutOff wraps a candidate's client: while cut, every call fails as if the
// API server were unreachable from that candidate only.
type cutOff struct {
	leaseClient
	cut atomic.Bool
}

var errUnreachable = errors.New("dial tcp: connect: connection refused")

func (c *cutOff) Get(ctx context.Context, name string, o metav1.GetOptions) (*coordinationv1.Lease, error) {
	if c.cut.Load() {
		return nil, errUnreachable
	}
	return c.leaseClient.Get(ctx, name, o)
}

func (c *cutOff) Create(ctx context.Context, l *coordinationv1.Lease, o metav1.CreateOptions) (*coordinationv1.Lease, error) {
	if c.cut.Load() {
		return nil, errUnreachable
	}
	return c.leaseClient.Create(ctx, l, o)
}

func (c *cutOff) Update(ctx context.Context, l *coordinationv1.Lease, o metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if c.cut.Load() {
		return nil, errUnreachable
	}
	return c.leaseClient.Update(ctx, l, o)
}

func (c *stepped) cuttable() *cutOff {
	w := &cutOff{leaseClient: c.leases}
	c.leases = w
	return w
}

// catchUp hands every candidate the stored Lease (or its deletion) if it
// has not seen it yet, as the informer would.
func (f *fakeAPI) catchUp(cands ...*stepped) {
	stored := f.lease()
	for _, c := range cands {
		switch {
		case stored != nil && (c.st.obs == nil || c.st.obs.ResourceVersion != stored.ResourceVersion):
			c.sees(stored)
		case stored == nil && c.st.obs != nil:
			c.seesDeleted(c.st.obs)
		}
	}
}

// handEdit changes the stored Lease as kubectl edit would (a new
// resourceVersion, not one of the candidates' calls).
func (f *fakeAPI) handEdit(edit func(*coordinationv1.Lease)) {
	f.t.Helper()
	l := f.lease()
	edit(l)
	if _, err := f.client.CoordinationV1().Leases(ns).Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	f.calls()
}

// wantLeads: c serves a valid token, and it is token.
func wantLeads(t *testing.T, c *stepped, token int64) {
	t.Helper()
	if s := c.Status(); !s.IsLeader || s.Token != token {
		t.Fatalf("%s: %+v, want leading with token %d", c.cfg.Identity, s, token)
	}
}

func wantCalls(t *testing.T, f *fakeAPI, what string, want ...string) {
	t.Helper()
	if got := f.calls(); !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
		t.Fatalf("%s: API calls %q, want %q", what, got, want)
	}
}

func TestLeaseDeletedDuringHandoffNeverIssuesATokenTwice(t *testing.T) {
	tests := []struct {
		name string
		// followerSees is what the losing follower's informer delivers
		// after the winner's update and the deletion.
		followerSees func(f *stepped, winner, before *coordinationv1.Lease)
	}{
		{"follower sees the winner's update, then the delete", func(f *stepped, winner, _ *coordinationv1.Lease) { f.sees(winner).seesDeleted(winner) }},
		{"follower's queued update and delete arrive as the delete alone", func(f *stepped, winner, _ *coordinationv1.Lease) { f.seesDeleted(winner) }},
		{"watch gap: the delete carries the version before the winner's", func(f *stepped, _, before *coordinationv1.Lease) { f.seesDeleted(before) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newFakeAPI(t, heldLease("", 5))
			f := api.stepped("f").seesStored()
			b := api.stepped("b").seesStored()
			before := api.lease()
			api.waitOutFreeLease()
			b.step()
			wantCalls(t, api, "b takes the free Lease", "update")
			if s := b.Status(); !s.IsLeader || s.Token != 6 {
				t.Fatalf("b: %+v", s)
			}
			f.step()
			wantCalls(t, api, "f loses the race", "update")
			winner := api.lease()
			api.deleteLease()
			tt.followerSees(f, winner, before)

			log := newTokenLog(t)
			// f acts first; b has not processed the deletion yet and
			// still serves token 6.
			f.step()
			log.check(f, b)
			for moved := time.Duration(0); moved < 3*ld; moved += 50 * time.Millisecond {
				api.catchUp(f, b)
				f.step()
				b.step()
				log.check(f, b)
				api.clock.Step(50 * time.Millisecond)
			}
			l := api.lease()
			if l == nil || holderOf(l) == "" {
				t.Fatalf("nobody leads after %v: lease %+v", 3*ld, l)
			}
			if tok := max(f.Status().Token, b.Status().Token); tok <= 6 {
				t.Fatalf("token after the deletion %d, want > 6", tok)
			}
		})
	}
}

func TestNewcomerNeverCreatesTheLeaseWhileAnOldLeaderMayServe(t *testing.T) {
	api := newFakeAPI(t, heldLease("", 6))
	a := api.stepped("a").seesStored()
	api.waitOutFreeLease()
	a.step()
	wantCalls(t, api, "a takes the Lease", "update")
	if a.Status().Token != 7 {
		t.Fatalf("a: %+v", a.Status())
	}
	a.cuttable().cut.Store(true) // a keeps serving until its renew deadline
	api.deleteLease()
	c := api.stepped("c").seesStored() // a new pod: it never saw the Lease

	log := newTokenLog(t)
	c.step()
	wantCalls(t, api, "the newcomer waits")
	for moved := time.Duration(0); moved < 2*ld; moved += 50 * time.Millisecond {
		a.step()
		c.step()
		log.check(a, c)
		api.clock.Step(50 * time.Millisecond)
	}
	if s := c.Status(); !s.IsLeader {
		t.Fatalf("the newcomer never led: %+v", s)
	}
}

func TestNewcomerWaitsOneLeaseDurationBeforeCreating(t *testing.T) {
	api := newFakeAPI(t)
	c := api.stepped("c").seesStored()
	if wake := c.step(); !wake.Equal(t0.Add(ld)) {
		t.Fatalf("wake %v, want %v", wake.Sub(t0), ld)
	}
	wantCalls(t, api, "before a lease duration")
	api.clock.Step(ld)
	c.step()
	wantCalls(t, api, "after a lease duration", "create")
	wantLeads(t, c, 1)
}

func TestFailedRestoreIsRetriedAndTheDeletedLeasesOwnDurationWaitedOut(t *testing.T) {
	old := heldLease("old", 4)
	old.Spec.LeaseDurationSeconds = ptr(int32(60)) // longer than ours (3s)
	api := newFakeAPI(t, old)
	f := api.stepped("f").seesStored()
	api.deleteLease()
	f.seesDeleted(old)
	api.fail("create", 1, apierrors.NewInternalError(errors.New("etcd timeout")))
	f.step()
	wantCalls(t, api, "restore attempt", "create")
	f.step()
	wantCalls(t, api, "no retry before a retry period")
	// f may be the only one that knows the count: it tries again.
	api.clock.Step(rp)
	f.step()
	wantCalls(t, api, "restore retried", "create")
	if l := api.lease(); holderOf(l) != "old" || transitionsOf(l) != 4 {
		t.Fatalf("restored %+v", l.Spec)
	}
	api.catchUp(f)
	for moved := rp; moved < 60*time.Second; moved += time.Second {
		f.step()
		wantCalls(t, api, "before the deleted Lease's duration")
		api.clock.Step(time.Second)
	}
	f.step()
	wantCalls(t, api, "after it", "update")
	wantLeads(t, f, 5)
}

func TestExLeaderTakesBackItsRestoredLeaseAtOnce(t *testing.T) {
	api := newFakeAPI(t, heldLease("", 5))
	b := api.stepped("b").seesStored()
	f := api.stepped("f").seesStored()
	api.waitOutFreeLease()
	b.step()
	wantCalls(t, api, "b leads", "update")
	api.catchUp(f)
	last := api.lease()
	api.deleteLease()
	f.seesDeleted(last)
	f.step()
	wantCalls(t, api, "f restores", "create")
	if l := api.lease(); holderOf(l) != "b" || transitionsOf(l) != 6 {
		t.Fatalf("restored %+v", l.Spec)
	}
	b.seesDeleted(last)
	if b.Status().IsLeader {
		t.Fatal("b still serves its token on a deleted Lease")
	}
	api.catchUp(b)
	b.step() // no time passes
	wantCalls(t, api, "b takes it back", "update")
	wantLeads(t, b, 7)
}

func TestLeaderThatFindsItsLeaseRecreatedAsItsOwnRecordTakesItBackAtOnce(t *testing.T) {
	api := newFakeAPI(t, heldLease("", 5))
	b := api.stepped("b").seesStored()
	f := api.stepped("f").seesStored()
	api.waitOutFreeLease()
	b.step()
	api.catchUp(f)
	last := api.lease()
	api.deleteLease()
	f.seesDeleted(last)
	f.step()
	wantCalls(t, api, "b leads, f restores", "update", "create")
	// b has not seen the deletion; its renew finds the restored Lease.
	api.clock.Step(rp)
	b.step()
	wantCalls(t, api, "b's renew conflicts, b reads the Lease and takes it back at once", "update", "get", "update")
	wantLeads(t, b, 7)
	// The deletion event arrives late: it is about the old Lease.
	notBefore := b.st.notBefore
	b.seesDeleted(last)
	wantLeads(t, b, 7)
	if b.st.obs == nil || !b.st.notBefore.Equal(notBefore) {
		t.Fatalf("the late deletion of the old Lease was applied: obs %v, notBefore %v (was %v)", b.st.obs, b.st.notBefore, notBefore)
	}
}

func TestFollowerRaisesALoweredCountKeepingTheHolder(t *testing.T) {
	api := newFakeAPI(t, heldLease("a", 7))
	b := api.stepped("b").seesStored()
	api.handEdit(func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr(int32(2)) })
	api.catchUp(b)
	b.step()
	wantCalls(t, api, "b raises the count", "update")
	if got := api.lease(); holderOf(got) != "a" || transitionsOf(got) != 7 {
		t.Fatalf("after the raise %+v", got.Spec)
	}
}

func TestLeaderWhoseCountWasRaisedTakesAHigherToken(t *testing.T) {
	api := newFakeAPI(t, heldLease("", 1))
	a := api.stepped("a").seesStored()
	api.waitOutFreeLease()
	a.step()
	api.handEdit(func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr(int32(9)) })
	api.catchUp(a)
	a.step()
	wantCalls(t, api, "a takes a new token", "update")
	wantLeads(t, a, 10)
}

func TestResourceVersionsGoingBackwardsDoNotWedgeTheElection(t *testing.T) {
	api := newFakeAPI(t, heldLease("", 1))
	a := api.stepped("a").seesStored()
	b := api.stepped("b").seesStored()
	a.step()
	api.catchUp(b)
	// etcd restored from a backup: the Lease is back at an older
	// resourceVersion, free.
	l := api.lease()
	l.ResourceVersion = "7"
	l.Spec.HolderIdentity = nil
	if err := api.client.Tracker().Update(leaseGVR, l, ns); err != nil {
		t.Fatal(err)
	}
	for moved := time.Duration(0); moved < 3*ld; moved += 50 * time.Millisecond {
		api.catchUp(a, b) // informer events at the older resourceVersion are ignored
		a.step()
		b.step()
		// Someone leads again: the stored Lease names it.
		for _, c := range []*stepped{a, b} {
			if c.Status().IsLeader && holderOf(api.lease()) == c.cfg.Identity {
				return
			}
		}
		api.clock.Step(50 * time.Millisecond)
	}
	t.Fatalf("nobody leads %v after a resourceVersion regression; lease %+v", 3*ld, api.lease())
}

func TestDeletionQueuedBeforeTheInitialSyncMarkerIsKept(t *testing.T) {
	api := newFakeAPI(t)
	c := api.stepped("c")
	l := heldLease("a", 3)
	c.deliver(observation{lease: l})
	c.deliver(observation{lease: l, deleted: true})
	c.deliver(observation{synced: true})
	c.drainInbox()
	c.publish()
	if s := c.Status(); !s.Ready || s.Holder != "" || s.HoldsLease || c.st.obs != nil {
		t.Fatalf("after add, delete, sync: %+v (obs %v)", s, c.st.obs)
	}
	c.step()
	wantCalls(t, api, "the deleted Lease is restored", "create")
}

func TestNoWriteStartsAfterTheContextEnds(t *testing.T) {
	api := newFakeAPI(t, heldLease("", 1))
	c := api.stepped("c").seesStored()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.process(ctx, context.Background())
	wantCalls(t, api, "after cancel")
}

func TestShutdownReleasesAnAcquireWhoseAnswerWasLost(t *testing.T) {
	api := newFakeAPI(t, heldLease("", 1))
	c := api.stepped("c").seesStored()
	api.waitOutFreeLease()
	// The API server applies the acquire, but its answer never arrives.
	lost := true
	prependReactor(&api.client.Fake, "update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if !lost {
			return false, nil, nil
		}
		lost = false
		if handled, _, err := api.compareAndSwap(a); handled {
			return true, nil, err
		}
		if err := api.client.Tracker().Update(leaseGVR, a.(k8stesting.UpdateAction).GetObject(), ns); err != nil {
			return true, nil, err
		}
		return true, nil, context.DeadlineExceeded
	})
	c.step()
	wantCalls(t, api, "acquire", "update")
	if c.Status().IsLeader || holderOf(api.lease()) != "c" {
		t.Fatalf("status %+v, lease %+v", c.Status(), api.lease().Spec)
	}
	if err := c.stepDown(context.Background(), "shutting down", true); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, api, "shutdown", "get", "update")
	if l := api.lease(); holderOf(l) != "" || transitionsOf(l) != 2 {
		t.Fatalf("after shutdown %+v", l.Spec)
	}
}

func TestReleaseRetriesAfterAnEarlierReleaseFailed(t *testing.T) {
	api := newFakeAPI(t, heldLease("", 1))
	a := api.stepped("a").seesStored()
	api.waitOutFreeLease()
	a.step()
	api.calls()
	api.fail("update", 1, apierrors.NewServiceUnavailable("down"))
	if err := a.stepDown(context.Background(), "released on request", true); err == nil {
		t.Fatal("a failed release returned nil")
	}
	if a.Status().IsLeader || holderOf(api.lease()) != "a" {
		t.Fatalf("after the failed release: %+v, lease %+v", a.Status(), api.lease().Spec)
	}
	if err := a.stepDown(context.Background(), "released on request", true); err != nil {
		t.Fatalf("second release: %v", err)
	}
	wantCalls(t, api, "both releases", "update", "update")
	if holderOf(api.lease()) != "" {
		t.Fatalf("lease still held: %+v", api.lease().Spec)
	}
	if err := a.stepDown(context.Background(), "released on request", true); err != nil {
		t.Fatalf("third release: %v", err)
	}
	wantCalls(t, api, "nothing left to release")
}

func TestReleaseNotTakenByTheLoopChangesNothing(t *testing.T) {
	api := newFakeAPI(t)
	c := api.stepped("c") // alive, but no loop takes requests
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := c.Release(ctx); !errors.Is(err, ErrReleaseNotProcessed) {
		t.Fatalf("Release = %v, want ErrReleaseNotProcessed", err)
	}
}
