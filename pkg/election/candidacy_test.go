package election

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"
)

// These run the whole loop on the fake API: a candidate taken out of the
// election and put back (app health), a release for a while (maintenance),
// the hook before a release, and the change notification.

func nextEvent(t *testing.T, c *running, want string) {
	t.Helper()
	for {
		select {
		case ev := <-c.events.Events:
			if strings.Contains(ev, want) {
				return
			}
		default:
			t.Fatalf("no event containing %q", want)
		}
	}
}

func TestWithdrawnLeaderStopsItsTokenAndReleasesSoAFollowerTakesOver(t *testing.T) {
	api, a, b := leaderAndFollower(t)
	var tokenDuringRelease atomic.Bool
	prependReactor(&api.client.Fake, "update", "leases", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if holderOf(act.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)) == "" {
			tokenDuringRelease.Store(a.Status().IsLeader)
		}
		return false, nil, nil
	})
	if err := a.SetCandidate(context.Background(), false, "app unhealthy"); err != nil {
		t.Fatalf("SetCandidate(false): %v", err)
	}
	if tokenDuringRelease.Load() {
		t.Fatal("a served its token while writing the Lease free")
	}
	s := a.Status()
	if s.IsLeader || s.Candidate || s.NotCandidate != "app unhealthy" {
		t.Fatalf("withdrawn leader status = %+v", s)
	}
	// The app did not give the token back: b waits out the validity a
	// had handed out (released with it), then takes over.
	api.advanceUntil("b leads", 2*ld, func() bool { return b.Status().IsLeader })
	nextEvent(t, a, "a stepped down: app unhealthy")
	if got := b.Status().Token; got != 3 {
		t.Fatalf("b token %d, want 3", got)
	}
}

func TestWithdrawnFollowerNeverTakesAFreeLeaseUntilItCampaignsAgain(t *testing.T) {
	api, a, b := leaderAndFollower(t)
	if err := b.SetCandidate(context.Background(), false, "app unhealthy"); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	// a holds off for a lease duration after its release; b must not take
	// the free Lease in that time, nor later while withdrawn.
	api.advanceUntil("a takes it back after its hold-off", 3*ld, func() bool { return a.Status().IsLeader })
	if s := b.Status(); s.IsLeader || s.Candidate {
		t.Fatalf("withdrawn b: %+v", s)
	}
	if err := a.SetCandidate(context.Background(), false, "app unhealthy"); err != nil {
		t.Fatal(err)
	}
	if err := b.SetCandidate(context.Background(), true, "app healthy"); err != nil {
		t.Fatal(err)
	}
	// a withdrew (the app did not give the token back): b waits out the
	// validity a had handed out.
	api.advanceUntil("b leads once it campaigns again", 2*ld, func() bool { return b.Status().IsLeader })
	nextEvent(t, b, "b campaigns again: app healthy")
}

func TestStartWithdrawnCandidateDoesNotCampaign(t *testing.T) {
	api := newFakeAPI(t, heldLease("", 1))
	api.mutate = func(c *Config) { c.StartWithdrawn = "app not healthy yet" }
	a := api.run("a", api.clock)
	eventually(t, "a listed the Lease", func() bool { return a.Status().Ready })
	api.clock.Step(2 * ld)
	if s := a.Status(); s.IsLeader || s.Candidate || s.NotCandidate != "app not healthy yet" {
		t.Fatalf("status = %+v", s)
	}
	if l := api.lease(); holderOf(l) != "" {
		t.Fatalf("Lease taken: %+v", l.Spec)
	}
	if err := a.SetCandidate(context.Background(), true, "app healthy"); err != nil {
		t.Fatal(err)
	}
	api.advanceUntil("a leads", 2*ld, func() bool { return a.Status().IsLeader })
}

func TestReleaseForKeepsThePodOutForThatLong(t *testing.T) {
	api, a, b := leaderAndFollower(t)
	if err := b.SetCandidate(context.Background(), false, "maintenance of b"); err != nil {
		t.Fatal(err)
	}
	const out = 10 * ld
	start := api.clock.Now()
	if err := a.ReleaseFor(context.Background(), out); err != nil {
		t.Fatal(err)
	}
	s := a.Status()
	if s.Candidate || !strings.HasPrefix(s.NotCandidate, "released for ") {
		t.Fatalf("status after ReleaseFor = %+v", s)
	}
	// Nobody else campaigns, and still a stays out well past one lease
	// duration: its only timer is at the end of the time out.
	api.clock.Step(out - ld)
	if wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 200*time.Millisecond, true,
		func(context.Context) (bool, error) { return a.Status().IsLeader, nil }) == nil {
		t.Fatal("a took the Lease back before its time out ended")
	}
	if api.clock.Since(start) >= out {
		t.Fatal("clock moved past the time out")
	}
	api.advanceUntil("a leads after its time out", 3*ld, func() bool { return a.Status().IsLeader })
	if !a.Status().Candidate {
		t.Fatal("a is not a candidate after its time out")
	}
}

func TestBeforeReleaseRunsAfterTheTokenStopsAndBeforeTheLeaseIsFreed(t *testing.T) {
	api := newFakeAPI(t, heldLease("", 1))
	var (
		mu    sync.Mutex
		order []string
		a     *running
	)
	api.mutate = func(c *Config) {
		c.BeforeRelease = func(ctx context.Context) {
			mu.Lock()
			defer mu.Unlock()
			order = append(order, "hook leader="+boolString(a.Status().IsLeader))
		}
	}
	prependReactor(&api.client.Fake, "update", "leases", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if holderOf(act.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)) == "" {
			mu.Lock()
			order = append(order, "release write")
			mu.Unlock()
		}
		return false, nil, nil
	})
	a = api.run("a", api.clock)
	api.advanceUntil("a leads", 2*ld, func() bool { return a.Status().IsLeader })
	if err := a.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(order, ", "); got != "hook leader=false, release write" {
		t.Fatalf("order = %s", got)
	}
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func TestChangedFiresWhenTheTokenRunsOutWithNoLeaseEvent(t *testing.T) {
	api := newFakeAPI(t, heldLease("", 1))
	a := api.run("a", api.clock)
	api.advanceUntil("a leads", 2*ld, func() bool { return a.Status().IsLeader })
	prependReactor(&api.client.Fake, "update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("cut off")
	})
	// Wait until the last successful renew is published, then step the
	// clock to the token's end exactly: nothing but the validity timer can
	// report the change.
	ch := a.Changed()
	s := a.Status()
	if !s.IsLeader {
		t.Fatal("not leading")
	}
	api.clock.Step(s.ExpiresIn)
	select {
	case <-ch:
	case <-time.After(waitFor):
		t.Fatal("Changed did not fire when the token ran out")
	}
	eventually(t, "a is no longer leader", func() bool { return !a.Status().IsLeader })
}

func TestChangedFiresOnEveryPublishedChange(t *testing.T) {
	api, a, b := leaderAndFollower(t)
	ch := b.Changed()
	if err := a.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(waitFor):
		t.Fatal("b's Changed did not fire on the release")
	}
	_ = api
}
