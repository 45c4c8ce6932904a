package election

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

const (
	ns    = "team"
	lease = "billing"
	ld    = 3 * time.Second
	rd    = 2 * time.Second
	rp    = 500 * time.Millisecond
	skew  = 200 * time.Millisecond
	// waitFor is a generous bound for the loop to react; tests never
	// depend on it being short.
	waitFor = 30 * time.Second
)

var leaseGVR = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}

type harness struct {
	t      *testing.T
	client *fake.Clientset
	clock  *testingclock.FakeClock
	mu     sync.Mutex
	cands  []*candidate
}

func newHarness(t *testing.T, objs ...runtime.Object) *harness {
	t.Helper()
	h := &harness{t: t, client: fake.NewClientset(objs...), clock: testingclock.NewFakeClock(time.Unix(1_800_000_000, 0))}
	h.client.PrependReactor("*", "leases", h.resourceVersions())
	return h
}

// resourceVersions gives the fake clientset what the API server does and
// the fake lacks: a resourceVersion on every write, and a Conflict for an
// update whose resourceVersion is not the stored one.
func (h *harness) resourceVersions() k8stesting.ReactionFunc {
	var mu sync.Mutex
	next := 100
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		var l *coordinationv1.Lease
		switch a.GetVerb() {
		case "create":
			l = a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease)
			l.UID = types.UID(fmt.Sprintf("uid-%d", next))
		case "update":
			l = a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
			cur, err := h.client.Tracker().Get(leaseGVR, ns, l.Name)
			if err != nil {
				return true, nil, err
			}
			if curRV := cur.(*coordinationv1.Lease).ResourceVersion; l.ResourceVersion != curRV {
				return true, nil, apierrors.NewConflict(leaseGVR.GroupResource(), l.Name, fmt.Errorf("resourceVersion %q, stored %q", l.ResourceVersion, curRV))
			}
		default:
			return false, nil, nil
		}
		next++
		l.ResourceVersion = fmt.Sprint(next)
		return false, nil, nil
	}
}

type candidate struct {
	*Elector
	cancel context.CancelFunc
	done   chan error
	reg    *prometheus.Registry
	events *record.FakeRecorder
}

func (h *harness) start(id string) *candidate {
	h.t.Helper()
	return h.startWith(id, h.clock)
}

func (h *harness) startWith(id string, clk clock.WithTicker) *candidate {
	h.t.Helper()
	reg := prometheus.NewRegistry()
	events := record.NewFakeRecorder(100)
	e, err := New(Config{
		Client: h.client, Namespace: ns, Name: lease, Identity: id,
		LeaseDuration: ld, RenewDeadline: rd, RetryPeriod: rp, ClockSkewMargin: skew,
		Clock: clk, Logger: testLogger(), Registerer: reg, Recorder: events,
	})
	if err != nil {
		h.t.Fatalf("New(%s): %v", id, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &candidate{Elector: e, cancel: cancel, done: make(chan error, 1), reg: reg, events: events}
	go func() { c.done <- e.Run(ctx) }()
	h.t.Cleanup(func() { c.stop(h.t) })
	h.mu.Lock()
	h.cands = append(h.cands, c)
	h.mu.Unlock()
	return c
}

func (c *candidate) stop(t *testing.T) {
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

// leaderAndFollower starts "a", waits until it leads, then starts "b" and
// waits until it has observed the Lease.
func (h *harness) leaderAndFollower() (a, b *candidate) {
	h.t.Helper()
	a = h.start("a")
	h.eventually("a leads", func() bool { return a.Status().IsLeader })
	b = h.start("b")
	h.eventually("b ready", func() bool { return b.Status().Ready })
	return a, b
}

// eventually polls cond (real time) until it holds.
func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (h *harness) get() *coordinationv1.Lease {
	h.t.Helper()
	l, err := h.client.CoordinationV1().Leases(ns).Get(context.Background(), lease, metav1.GetOptions{})
	if err != nil {
		h.t.Fatalf("get lease: %v", err)
	}
	return l
}

// settle waits (real time) until every running candidate has seen the
// stored Lease and its loop is waiting, so fake time never outruns the
// loops or the watch: on a loaded machine they are merely slower.
func (h *harness) settle() {
	h.t.Helper()
	h.mu.Lock()
	cands := append([]*candidate(nil), h.cands...)
	h.mu.Unlock()
	h.eventually("candidates settle", func() bool {
		rv := ""
		if l, err := h.client.Tracker().Get(leaseGVR, ns, lease); err == nil {
			rv = l.(*coordinationv1.Lease).ResourceVersion
		}
		for _, c := range cands {
			if !c.Alive() {
				continue
			}
			s := c.snap.Load()
			wake := c.wakeAt.Load()
			pending := wake != nil && !wake.IsZero() && !wake.After(h.clock.Now())
			if !c.idle.Load() || pending || len(c.notify) > 0 || (s.ready && s.rv != rv) {
				return false
			}
		}
		return true
	})
}

// advanceUntil moves the fake clock in small steps, settling after each, so
// that every timer set on the way fires in order, until cond holds.
func (h *harness) advanceUntil(what string, limit time.Duration, cond func() bool) {
	h.t.Helper()
	step := 50 * time.Millisecond
	h.settle()
	for moved := time.Duration(0); !cond(); moved += step {
		if moved > limit {
			h.t.Fatalf("%s: not after %v of fake time", what, limit)
		}
		h.clock.Step(step)
		h.settle()
	}
}

func heldLease(holder string, transitions int32) *coordinationv1.Lease {
	now := metav1.NewMicroTime(time.Unix(1_800_000_000, 0))
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: lease, Namespace: ns, UID: "uid-1", ResourceVersion: "5"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr(holder), LeaseDurationSeconds: ptr(int32(3)),
			AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr(transitions),
		},
	}
}

func TestFirstCandidateCreatesLeaseWithTokenOne(t *testing.T) {
	h := newHarness(t)
	a := h.start("a")
	h.eventually("a leads", func() bool { return a.Status().IsLeader })
	s := a.Status()
	if s.Token != 1 || s.Holder != "a" || !s.HoldsLease || !s.Ready || s.Lease != ns+"/"+lease {
		t.Fatalf("status = %+v", s)
	}
	if s.ExpiresIn <= 0 || s.ExpiresIn > ld-skew {
		t.Fatalf("expiresIn %v, want in (0, %v]", s.ExpiresIn, ld-skew)
	}
	l := h.get()
	if holderOf(l) != "a" || transitionsOf(l) != 1 || *l.Spec.LeaseDurationSeconds != 3 {
		t.Fatalf("lease spec = %+v", l.Spec)
	}
	if got := testutil.ToFloat64(a.metrics.acquisitions); got != 1 {
		t.Fatalf("acquisitions = %v", got)
	}
	if ev := <-a.events.Events; ev != "Normal LeaderElection a became leader with fencing token 1" {
		t.Fatalf("event %q", ev)
	}
}

func TestLeaderRenewsWithCompareAndSwap(t *testing.T) {
	h := newHarness(t)
	var mu sync.Mutex
	var updates []*coordinationv1.Lease
	h.client.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		updates = append(updates, a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy())
		return false, nil, nil
	})
	c := h.start("a")
	h.eventually("a leads", func() bool { return c.Status().IsLeader })
	first := h.get().Spec.RenewTime.Time
	h.advanceUntil("renewed three times", 10*rp, func() bool { mu.Lock(); defer mu.Unlock(); return len(updates) >= 3 })
	mu.Lock()
	defer mu.Unlock()
	for i, u := range updates {
		if u.ResourceVersion == "" {
			t.Fatalf("update %d has no resourceVersion: not a compare-and-swap", i)
		}
		if transitionsOf(u) != 1 || holderOf(u) != "a" {
			t.Fatalf("renew %d changed the record: %+v", i, u.Spec)
		}
	}
	h.eventually("lease renewed", func() bool { return h.get().Spec.RenewTime.After(first) })
	if s := c.Status(); !s.IsLeader || s.Token != 1 {
		t.Fatalf("after renewals status = %+v", s)
	}
}

func TestFollowerDoesNotPollAndTakesOverAfterExpiry(t *testing.T) {
	h := newHarness(t, heldLease("other", 4))
	var mu sync.Mutex
	var gets, writes int
	h.client.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		switch a.GetVerb() {
		case "get":
			gets++
		case "update", "create":
			writes++
		}
		return false, nil, nil
	})
	b := h.start("b")
	h.eventually("b observed the lease", func() bool { return b.Status().Ready })
	// Just short of the lease duration: b must not act.
	h.clock.Step(ld - 100*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	if gets != 0 || writes != 0 {
		t.Fatalf("follower made %d gets and %d writes before expiry", gets, writes)
	}
	mu.Unlock()
	if s := b.Status(); s.IsLeader || s.Holder != "other" {
		t.Fatalf("before expiry status = %+v", s)
	}
	h.advanceUntil("b leads", ld, func() bool { return b.Status().IsLeader })
	if s := b.Status(); s.Token != 5 {
		t.Fatalf("token %d, want 5", s.Token)
	}
}

func TestOnlyOneOfManyCandidatesLeads(t *testing.T) {
	h := newHarness(t)
	var cs []*candidate
	for i := 0; i < 5; i++ {
		cs = append(cs, h.start(fmt.Sprintf("c%d", i)))
	}
	leaders := func() (n int) {
		for _, c := range cs {
			if c.Status().IsLeader {
				n++
			}
		}
		return n
	}
	h.eventually("a leader", func() bool { return leaders() == 1 })
	for i := 0; i < 20; i++ {
		h.settle()
		h.clock.Step(rp / 2)
		h.settle()
		if n := leaders(); n > 1 {
			t.Fatalf("%d leaders at once", n)
		}
	}
	if transitionsOf(h.get()) != 1 {
		t.Fatalf("transitions %d, want 1", transitionsOf(h.get()))
	}
}

func TestReleaseStopsTokenBeforeWriteAndHandsOverOnWatchEvent(t *testing.T) {
	h := newHarness(t)
	a, b := h.leaderAndFollower()

	var sawTokenDuringRelease, released bool
	var mu sync.Mutex
	h.client.PrependReactor("update", "leases", func(act k8stesting.Action) (bool, runtime.Object, error) {
		l := act.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if holderOf(l) == "" {
			mu.Lock()
			released = true
			sawTokenDuringRelease = a.Status().IsLeader
			mu.Unlock()
		}
		return false, nil, nil
	})
	if err := a.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	mu.Lock()
	if !released || sawTokenDuringRelease {
		t.Fatalf("released=%v, token served during the release write=%v", released, sawTokenDuringRelease)
	}
	mu.Unlock()
	// No clock step: the handoff must come from the watch event alone.
	h.eventually("b leads", func() bool { return b.Status().IsLeader })
	if s := b.Status(); s.Token != 2 {
		t.Fatalf("b token %d, want 2", s.Token)
	}
	if a.Status().IsLeader {
		t.Fatal("a still leads")
	}
	// a must not take it back at once.
	if err := a.Release(context.Background()); err != nil {
		t.Fatalf("Release by a follower: %v", err)
	}
}

func TestReleasedCandidateHoldsOffThenRetakesUnclaimedLease(t *testing.T) {
	h := newHarness(t)
	a := h.start("a")
	h.eventually("a leads", func() bool { return a.Status().IsLeader })
	if err := a.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.eventually("lease free", func() bool { return holderOf(h.get()) == "" })
	time.Sleep(20 * time.Millisecond)
	if a.Status().IsLeader {
		t.Fatal("a took the lease back at once after releasing it")
	}
	h.advanceUntil("a retakes the unclaimed lease", 2*ld, func() bool { return a.Status().IsLeader })
	if s := a.Status(); s.Token != 2 {
		t.Fatalf("token %d, want 2 (a new term)", s.Token)
	}
}

func TestLeaderLosesTokenWhenRenewalsFail(t *testing.T) {
	h := newHarness(t)
	a, b := h.leaderAndFollower()
	h.client.PrependReactor("update", "leases", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if holderOf(act.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)) == "a" {
			return true, nil, apierrors.NewServiceUnavailable("apiserver unreachable from a")
		}
		return false, nil, nil
	})
	lastToken := a.Status().Token
	// The token must be gone before b can take over, at every instant.
	h.advanceUntil("b leads", 3*ld, func() bool {
		if a.Status().IsLeader && b.Status().IsLeader {
			t.Fatal("both a and b report a valid token")
		}
		return b.Status().IsLeader
	})
	if s := b.Status(); s.Token <= lastToken {
		t.Fatalf("b token %d, want > %d", s.Token, lastToken)
	}
	if got := testutil.ToFloat64(a.metrics.losses.WithLabelValues("renew_deadline")); got != 1 {
		// a may also have seen b's takeover first; either way it lost once.
		if testutil.ToFloat64(a.metrics.losses.WithLabelValues("taken")) != 1 {
			t.Fatalf("a's losses not counted")
		}
	}
	if err := testutil.CollectAndCompare(a.reg, strings.NewReader("# HELP elector_is_leader 1 while this process leads and its fencing token is safe to use, else 0.\n# TYPE elector_is_leader gauge\nelector_is_leader 0\n"), "elector_is_leader"); err != nil {
		t.Fatal(err)
	}
}

func TestRenewConflictRereadsAndKeepsTerm(t *testing.T) {
	h := newHarness(t)
	a := h.start("a")
	h.eventually("a leads", func() bool { return a.Status().IsLeader })
	var once sync.Once
	conflicted := make(chan struct{})
	h.client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		handled := false
		once.Do(func() {
			handled = true
			close(conflicted)
		})
		if handled {
			return true, nil, apierrors.NewConflict(leaseGVR.GroupResource(), lease, errors.New("injected"))
		}
		return false, nil, nil
	})
	before := h.get().ResourceVersion
	h.advanceUntil("renew after a conflict", 4*rp, func() bool {
		select {
		case <-conflicted:
			return h.get().ResourceVersion != before
		default:
			return false
		}
	})
	if s := a.Status(); !s.IsLeader || s.Token != 1 {
		t.Fatalf("after a conflict status = %+v", s)
	}
}

func TestSameIdentityRestartDoesNotResumeTerm(t *testing.T) {
	// A Lease held by "a" from an earlier process: the new "a" must wait it
	// out and take a new token, never resume the old term.
	h := newHarness(t, heldLease("a", 7))
	a := h.start("a")
	h.eventually("a observed", func() bool { return a.Status().Ready })
	s := a.Status()
	if s.IsLeader || !s.HoldsLease {
		t.Fatalf("new process resumed an old term: %+v", s)
	}
	h.advanceUntil("a leads", 2*ld, func() bool { return a.Status().IsLeader })
	if s := a.Status(); s.Token != 8 {
		t.Fatalf("token %d, want 8", s.Token)
	}
}

func TestDeletedLeaseNeverLowersTokens(t *testing.T) {
	h := newHarness(t)
	a, b := h.leaderAndFollower()
	// Hand over once, so the token is 2 and b leads.
	if err := a.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.eventually("b leads", func() bool { return b.Status().IsLeader })
	leader, follower := b, a
	high := leader.Status().Token
	if err := h.client.CoordinationV1().Leases(ns).Delete(context.Background(), lease, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The leader notices and recreates the Lease past every token it saw,
	// or the follower restores it first; either way the next token is
	// higher than every earlier one.
	h.advanceUntil("someone leads the recreated lease", 3*ld, func() bool {
		return leader.Status().IsLeader || follower.Status().IsLeader
	})
	tok := max(leader.Status().Token, follower.Status().Token)
	if tok <= high {
		t.Fatalf("token after the delete %d, want > %d", tok, high)
	}
	if l := h.get(); transitionsOf(l) != tok {
		t.Fatalf("lease transitions %d, token %d", transitionsOf(l), tok)
	}
}

// TestDeletedLeaseRestoredForNewcomers: the leader is gone, the Lease is
// deleted, then a new candidate that never saw it starts. A follower that
// saw the old Lease puts it back, so the newcomer's token is not 1.
func TestDeletedLeaseRestoredForNewcomers(t *testing.T) {
	h := newHarness(t, heldLease("crashed", 5))
	b := h.start("b")
	h.eventually("b observed", func() bool { return b.Status().Ready })
	if err := h.client.CoordinationV1().Leases(ns).Delete(context.Background(), lease, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("b restored the lease", func() bool {
		l, err := h.client.CoordinationV1().Leases(ns).Get(context.Background(), lease, metav1.GetOptions{})
		return err == nil && holderOf(l) == "crashed" && transitionsOf(l) == 5
	})
	c := h.start("c")
	h.eventually("c observed", func() bool { return c.Status().Ready })
	if c.Status().IsLeader || b.Status().IsLeader {
		t.Fatal("someone took the restored lease before it expired")
	}
	h.advanceUntil("someone leads", 3*ld, func() bool { return b.Status().IsLeader || c.Status().IsLeader })
	if tok := max(b.Status().Token, c.Status().Token); tok != 6 {
		t.Fatalf("token %d, want 6", tok)
	}
}

func TestHandLoweredTransitionsNeverLowerTokens(t *testing.T) {
	h := newHarness(t)
	a, b := h.leaderAndFollower()
	if err := a.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.eventually("b leads", func() bool { return b.Status().IsLeader })
	high := b.Status().Token // 2
	// Hand edit: another holder, transitions lowered to 0.
	l := h.get()
	l.Spec.HolderIdentity = ptr("mallory")
	l.Spec.LeaseTransitions = ptr(int32(0))
	if _, err := h.client.CoordinationV1().Leases(ns).Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("b lost its term", func() bool { return !b.Status().IsLeader })
	h.advanceUntil("someone leads again", 3*ld, func() bool { return a.Status().IsLeader || b.Status().IsLeader })
	tok := max(a.Status().Token, b.Status().Token)
	if tok <= high {
		t.Fatalf("token after hand edit %d, want > %d", tok, high)
	}
}

func TestShutdownReleasesLease(t *testing.T) {
	h := newHarness(t)
	a := h.start("a")
	h.eventually("a leads", func() bool { return a.Status().IsLeader })
	a.stop(t)
	if l := h.get(); holderOf(l) != "" || transitionsOf(l) != 1 {
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
	h := newHarness(t)
	h.client.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("down")
	})
	h.client.PrependWatchReactor("leases", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, nil, apierrors.NewServiceUnavailable("down")
	})
	a := h.start("a")
	time.Sleep(100 * time.Millisecond)
	h.clock.Step(2 * ld)
	time.Sleep(50 * time.Millisecond)
	if s := a.Status(); s.IsLeader || s.Ready || s.Token != 0 {
		t.Fatalf("status with no API server = %+v", s)
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	if _, err := New(Config{Namespace: ns, Name: lease, Identity: "a", LeaseDuration: ld, RenewDeadline: rd, RetryPeriod: rp}); err == nil {
		t.Fatal("New without a client succeeded")
	}
	if _, err := New(Config{Client: fake.NewClientset(), Name: lease, Identity: "a"}); err == nil {
		t.Fatal("New with zero timings succeeded")
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("ELECTOR_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// TestRealClockElectsAndRenews runs two candidates on the real clock: the
// fake clock never moves between two reads, the real one always does.
func TestRealClockElectsAndRenews(t *testing.T) {
	h := newHarness(t)
	var mu sync.Mutex
	writes := 0
	h.client.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetVerb() == "update" || a.GetVerb() == "create" {
			mu.Lock()
			writes++
			mu.Unlock()
		}
		return false, nil, nil
	})
	a := h.startWith("a", clock.RealClock{})
	b := h.startWith("b", clock.RealClock{})
	h.eventually("a leader", func() bool { return a.Status().IsLeader || b.Status().IsLeader })
	leader := a
	if b.Status().IsLeader {
		leader = b
	}
	tok := leader.Status().Token
	h.eventually("a renewal", func() bool { mu.Lock(); defer mu.Unlock(); return writes >= 3 })
	mu.Lock()
	n := writes
	mu.Unlock()
	// A busy loop would write far more often than once per retry period.
	time.Sleep(4 * rp)
	mu.Lock()
	if extra := writes - n; extra > 20 {
		t.Fatalf("%d writes in %v: the loop spins", extra, 4*rp)
	}
	mu.Unlock()
	if s := leader.Status(); s.Token != tok {
		t.Fatalf("token changed from %d to %d while renewing", tok, s.Token)
	}
}

func TestCreateInMissingNamespaceBacksOff(t *testing.T) {
	h := newHarness(t)
	var mu sync.Mutex
	creates := 0
	h.client.PrependReactor("create", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		creates++
		mu.Unlock()
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, ns)
	})
	a := h.start("a")
	h.eventually("first create", func() bool { mu.Lock(); defer mu.Unlock(); return creates == 1 })
	h.settle()
	mu.Lock()
	if creates != 1 {
		t.Fatalf("%d creates without the clock moving: no back-off", creates)
	}
	mu.Unlock()
	h.advanceUntil("retry after the retry period", 2*rp, func() bool { mu.Lock(); defer mu.Unlock(); return creates == 2 })
	if a.Status().IsLeader {
		t.Fatal("leader without a Lease")
	}
}
