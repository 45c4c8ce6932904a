package election

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/elector-sidecar/elector-sidecar/pkg/kubeclient/clientset"
)

// These tests run the whole loop (Run, the informer, timers) on the fake
// API: the wiring. The algorithm's exact behaviour is in the table and
// stepped tests; here every wait is on a condition, with a generous bound.

const waitFor = 30 * time.Second

type running struct {
	*Elector
	cancel context.CancelFunc
	done   chan error
	reg    *prometheus.Registry
	events *record.FakeRecorder
}

func (f *fakeAPI) run(id string, clk clock.WithTicker) *running {
	f.t.Helper()
	e, events, reg := f.newElector(id, clk)
	ctx, cancel := context.WithCancel(context.Background())
	c := &running{Elector: e, cancel: cancel, done: make(chan error, 1), reg: reg, events: events}
	go func() { c.done <- e.Run(ctx) }()
	f.t.Cleanup(func() { c.stop(f.t) })
	return c
}

func (c *running) stop(t *testing.T) {
	c.cancel()
	select {
	case err := <-c.done:
		if err != nil {
			t.Errorf("Run returned %v", err)
		}
		c.done <- nil // later stops return at once
	case <-time.After(waitFor):
		t.Errorf("Run did not return after cancel")
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, waitFor, true, func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// advanceUntil moves the fake clock in small steps until cond holds,
// giving the loops up to a short real-time moment after each step to act.
func (f *fakeAPI) advanceUntil(what string, limit time.Duration, cond func() bool) {
	f.t.Helper()
	for moved := time.Duration(0); ; moved += 50 * time.Millisecond {
		if wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 50*time.Millisecond, true, func(context.Context) (bool, error) { return cond(), nil }) == nil {
			return
		}
		if moved > limit {
			f.t.Fatalf("%s: not after %v of fake time", what, limit)
		}
		f.clock.Step(50 * time.Millisecond)
	}
}

func TestFirstCandidateCreatesTheLeaseWithTokenOneAfterALeaseDuration(t *testing.T) {
	api := newFakeAPI(t)
	a := api.run("a", api.clock)
	eventually(t, "a has listed the Lease", func() bool { return a.Status().Ready })
	if api.lease() != nil {
		t.Fatal("created before a lease duration passed")
	}
	api.advanceUntil("a leads", 2*ld, func() bool { return a.Status().IsLeader })
	s := a.Status()
	if s.Token != 1 || s.Holder != "a" || !s.HoldsLease || s.Lease != ns+"/"+leaseName {
		t.Fatalf("status = %+v", s)
	}
	if s.ExpiresIn <= 0 || s.ExpiresIn > ld-skew {
		t.Fatalf("expiresIn %v, want in (0, %v]", s.ExpiresIn, ld-skew)
	}
	if got := testutil.ToFloat64(a.metrics.acquisitions); got != 1 {
		t.Fatalf("acquisitions = %v", got)
	}
	if ev := <-a.events.Events; ev != "Normal LeaderElection a became leader with fencing token 1" {
		t.Fatalf("event %q", ev)
	}
}

func TestLeaderRenewsWithOneCompareAndSwapWritePerRetryPeriod(t *testing.T) {
	api := newFakeAPI(t, heldLease("", 1))
	var mu sync.Mutex
	var updates []*coordinationv1.Lease
	prependReactor(&api.client.Fake, "update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		updates = append(updates, a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy())
		return false, nil, nil
	})
	a := api.run("a", api.clock)
	api.advanceUntil("a leads", 2*ld, func() bool { return a.Status().IsLeader })
	api.advanceUntil("three renewals", 10*rp, func() bool { mu.Lock(); defer mu.Unlock(); return len(updates) >= 4 })
	mu.Lock()
	defer mu.Unlock()
	for i, u := range updates {
		if u.ResourceVersion == "" {
			t.Fatalf("update %d has no resourceVersion: not a compare-and-swap", i)
		}
		if transitionsOf(u) != 2 || holderOf(u) != "a" {
			t.Fatalf("write %d changed the record: %+v", i, u.Spec)
		}
	}
	if s := a.Status(); !s.IsLeader || s.Token != 2 {
		t.Fatalf("after renewals status = %+v", s)
	}
}

// leaderAndFollower runs "a", which takes a free Lease (token 2), then "b",
// once a leads, until b has seen a.
func leaderAndFollower(t *testing.T) (api *fakeAPI, a, b *running) {
	t.Helper()
	api = newFakeAPI(t, heldLease("", 1))
	a = api.run("a", api.clock)
	api.advanceUntil("a leads", 2*ld, func() bool { return a.Status().IsLeader })
	b = api.run("b", api.clock)
	eventually(t, "b sees a", func() bool { return b.Status().Holder == "a" })
	return api, a, b
}

func TestReleaseStopsTheTokenBeforeTheWriteAndHandsOverOnTheWatchEvent(t *testing.T) {
	api, a, b := leaderAndFollower(t)

	var tokenDuringRelease, released atomic.Bool
	prependReactor(&api.client.Fake, "update", "leases", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if holderOf(act.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)) == "" {
			released.Store(true)
			tokenDuringRelease.Store(a.Status().IsLeader)
		}
		return false, nil, nil
	})
	if err := a.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if !released.Load() || tokenDuringRelease.Load() {
		t.Fatalf("released=%v, token served during the release write=%v", released.Load(), tokenDuringRelease.Load())
	}
	// No clock step: the handoff comes from the watch event alone.
	eventually(t, "b leads", func() bool { return b.Status().IsLeader })
	if s := b.Status(); s.Token != 3 {
		t.Fatalf("b token %d, want 3", s.Token)
	}
	if a.Status().IsLeader {
		t.Fatal("a still leads")
	}
	if err := a.Release(context.Background()); err != nil {
		t.Fatalf("Release by a follower: %v", err)
	}
}

func TestLeaderLosesItsTokenBeforeAFollowerCanTakeOver(t *testing.T) {
	api, a, b := leaderAndFollower(t)
	prependReactor(&api.client.Fake, "update", "leases", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if holderOf(act.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)) == "a" {
			return true, nil, apierrors.NewServiceUnavailable("apiserver unreachable from a")
		}
		return false, nil, nil
	})
	var both atomic.Bool
	api.advanceUntil("b leads", 3*ld, func() bool {
		if a.Status().IsLeader && b.Status().IsLeader {
			both.Store(true)
		}
		return b.Status().IsLeader
	})
	if both.Load() {
		t.Fatal("a and b served a valid token at the same instant")
	}
	eventually(t, "a counted its loss", func() bool {
		return testutil.ToFloat64(a.metrics.losses.WithLabelValues(string(LossRenewDeadline)))+testutil.ToFloat64(a.metrics.losses.WithLabelValues(string(LossTaken))) == 1
	})
	if err := testutil.CollectAndCompare(a.reg, strings.NewReader("# HELP elector_is_leader 1 while this process leads and its fencing token is safe to use, else 0.\n# TYPE elector_is_leader gauge\nelector_is_leader 0\n"), "elector_is_leader"); err != nil {
		t.Fatal(err)
	}
}

func TestShutdownReleasesTheLease(t *testing.T) {
	api := newFakeAPI(t, heldLease("", 1))
	a := api.run("a", api.clock)
	api.advanceUntil("a leads", 2*ld, func() bool { return a.Status().IsLeader })
	a.stop(t)
	if l := api.lease(); holderOf(l) != "" || transitionsOf(l) != 2 {
		t.Fatalf("after shutdown lease spec = %+v", l.Spec)
	}
	if a.Status().IsLeader || a.Alive() {
		t.Fatal("stopped elector still leads or is alive")
	}
	if err := a.Release(context.Background()); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Release after stop = %v, want ErrNotRunning", err)
	}
}

func TestUnreachableAPIServerIsNeverLeader(t *testing.T) {
	api := newFakeAPI(t)
	var calls atomic.Int32
	prependReactor(&api.client.Fake, "*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		calls.Add(1)
		return true, nil, apierrors.NewServiceUnavailable("down")
	})
	api.client.PrependWatchReactor("leases", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, nil, apierrors.NewServiceUnavailable("down")
	})
	a := api.run("a", api.clock)
	eventually(t, "the informer tried to list", func() bool { return calls.Load() > 0 })
	api.clock.Step(2 * ld)
	eventually(t, "the informer retried", func() bool { return calls.Load() > 1 })
	if s := a.Status(); s.IsLeader || s.Ready || s.Token != 0 {
		t.Fatalf("status with no API server = %+v", s)
	}
}

// TestRealClockElectsAndRenews runs two candidates on the real clock: the
// fake clock never moves between two reads, the real one always does.
func TestRealClockElectsAndRenews(t *testing.T) {
	api := newFakeAPI(t, heldLease("", 1))
	var writes atomic.Int32
	prependReactor(&api.client.Fake, "*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetVerb() == "update" || a.GetVerb() == "create" {
			writes.Add(1)
		}
		return false, nil, nil
	})
	a := api.run("a", clock.RealClock{})
	b := api.run("b", clock.RealClock{})
	eventually(t, "a leader", func() bool { return a.Status().IsLeader || b.Status().IsLeader })
	leader := a
	if b.Status().IsLeader {
		leader = b
	}
	tok := leader.Status().Token
	start := time.Now()
	eventually(t, "four renewals", func() bool { return writes.Load() >= 5 })
	// A loop that spins would write far more often than once per retry period.
	if n, took := writes.Load(), time.Since(start); float64(n) > 3+2*took.Seconds()/rp.Seconds() {
		t.Fatalf("%d writes in %v: the loop spins", n, took)
	}
	if s := leader.Status(); s.Token != tok {
		t.Fatalf("token changed from %d to %d while renewing", tok, s.Token)
	}
}

func TestCreateInAMissingNamespaceBacksOff(t *testing.T) {
	api := newFakeAPI(t)
	var creates atomic.Int32
	prependReactor(&api.client.Fake, "create", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		creates.Add(1)
		return true, nil, apierrors.NewNotFound(coordinationv1.Resource("namespaces"), ns)
	})
	a := api.run("a", api.clock)
	eventually(t, "ready", func() bool { return a.Status().Ready })
	api.advanceUntil("first create", 2*ld, func() bool { return creates.Load() == 1 })
	api.advanceUntil("retry after the retry period", 2*rp, func() bool { return creates.Load() == 2 })
	if a.Status().IsLeader {
		t.Fatal("leader without a Lease")
	}
}

// gatedLeases holds one candidate's writes outside the fake clientset's
// lock, so a test can interleave them with other candidates' writes.
type gatedLeases struct {
	leaseClient
	onUpdate func(l *coordinationv1.Lease) (gate <-chan struct{}, err error)
}

func (g *gatedLeases) Update(ctx context.Context, l *coordinationv1.Lease, o metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if g.onUpdate != nil {
		if gate, err := g.onUpdate(l); gate != nil {
			<-gate
			if err != nil {
				return nil, err
			}
		}
	}
	return g.leaseClient.Update(ctx, l, o)
}

func (f *fakeAPI) runGated(id string, g *gatedLeases) *running {
	f.t.Helper()
	e, events, reg := f.newElector(id, f.clock)
	g.leaseClient = e.leases
	e.leases = g
	ctx, cancel := context.WithCancel(context.Background())
	c := &running{Elector: e, cancel: cancel, done: make(chan error, 1), reg: reg, events: events}
	go func() { c.done <- e.Run(ctx) }()
	f.t.Cleanup(func() { c.stop(f.t) })
	return c
}

// TestLeaseDeletedWhileARacingAcquireIsInFlight is the review's reproducer
// on the running loop: f's acquire is held until b has won (token 6), b's
// renew is in flight, and the Lease is deleted; then f's acquire fails.
// f must not serve token 6 while b still does.
func TestLeaseDeletedWhileARacingAcquireIsInFlight(t *testing.T) {
	api := newFakeAPI(t, heldLease("", 5))
	gateF, gateB := make(chan struct{}), make(chan struct{})
	fBlocked, bBlocked := make(chan struct{}), make(chan struct{})
	var fOnce, bOnce sync.Once
	var bUpdates atomic.Int32
	var gateBOnce, gateFOnce sync.Once
	openB := func() { gateBOnce.Do(func() { close(gateB) }) }
	openF := func() { gateFOnce.Do(func() { close(gateF) }) }
	f := api.runGated("f", &gatedLeases{onUpdate: func(*coordinationv1.Lease) (<-chan struct{}, error) {
		first := false
		fOnce.Do(func() { first = true })
		if first {
			close(fBlocked)
			return gateF, apierrors.NewConflict(leaseGVR.GroupResource(), leaseName, errors.New("b won"))
		}
		return nil, nil
	}})
	api.advanceUntil("f's acquire is in flight", 2*ld, func() bool {
		select {
		case <-fBlocked:
			return true
		default:
			return false
		}
	})
	b := api.runGated("b", &gatedLeases{onUpdate: func(*coordinationv1.Lease) (<-chan struct{}, error) {
		if bUpdates.Add(1) == 2 {
			bOnce.Do(func() { close(bBlocked) })
			return gateB, nil
		}
		return nil, nil
	}})
	t.Cleanup(openF) // before the candidates' stops, which run first otherwise
	t.Cleanup(openB)
	api.advanceUntil("b leads", 2*ld, func() bool { return b.Status().IsLeader })
	if tok := b.Status().Token; tok != 6 {
		t.Fatalf("b token %d", tok)
	}
	api.clock.Step(rp)
	<-bBlocked
	api.deleteLease()
	// f's loop is still inside its acquire: the deletion waits in its queue.
	eventually(t, "the deletion is queued for f", func() bool { return f.queuedDeletion() })
	openF()
	// b serves token 6 until its renew returns; f must not serve 6 meanwhile.
	overlap := func() bool {
		fs, bs := f.Status(), b.Status()
		return fs.IsLeader && bs.IsLeader
	}
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 500*time.Millisecond, true, func(context.Context) (bool, error) { return overlap(), nil })
	if err == nil {
		t.Fatalf("overlap: f %+v, b %+v", f.Status(), b.Status())
	}
	openB()
	api.advanceUntil("someone leads with a token above 6", 4*ld, func() bool {
		if overlap() {
			t.Errorf("overlap: f %+v, b %+v", f.Status(), b.Status())
		}
		return max(f.Status().Token, b.Status().Token) > 6
	})
}

// queuedDeletion: a deletion waits in the loop's queue.
func (e *Elector) queuedDeletion() bool {
	e.inboxMu.Lock()
	defer e.inboxMu.Unlock()
	for _, o := range e.inbox {
		if o.deleted {
			return true
		}
	}
	return false
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	if _, err := New(Config{Namespace: ns, Name: leaseName, Identity: "a", LeaseDuration: ld, RenewDeadline: rd, RetryPeriod: rp}); err == nil {
		t.Fatal("New without a client succeeded")
	}
	if _, err := New(Config{Client: clientset.Wrap(fake.NewClientset()), Name: leaseName, Identity: "a"}); err == nil {
		t.Fatal("New with zero timings succeeded")
	}
}
