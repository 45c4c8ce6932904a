// The fuzz runs of hack/test.sh build with -tags elector_fuzz and leave this
// file out: its typed clientset (client-go's kubernetes package, every API
// group) would more than double the fuzzing build, which instruments every
// package the test binary links.

//go:build !elector_fuzz

package localapi

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
	"github.com/elector-sidecar/elector-sidecar/pkg/kubeclient/clientset"
)

// The push endpoints on the real election.Elector, on a fake clientset
// with compare-and-swap semantics and a fake clock (the same setup as
// pkg/election's loop tests, cut down to what is needed here).

const (
	testNS    = "team"
	testLease = "billing"
	testLD    = 3 * time.Second
)

var leaseGVR = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}

type fakeAPI struct {
	client *fake.Clientset
	clock  *testingclock.FakeClock
	mu     sync.Mutex
	next   int
}

func newFakeAPI() *fakeAPI {
	now := metav1.NewMicroTime(t0)
	free := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: testLease, Namespace: testNS, UID: "uid-1", ResourceVersion: "5"},
		Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptrTo(int32(3)), AcquireTime: &now, RenewTime: &now,
			LeaseTransitions: ptrTo(int32(1))},
	}
	f := &fakeAPI{client: fake.NewClientset(free), clock: testingclock.NewFakeClock(t0), next: 100}
	f.client.PrependReactor("*", "leases", f.compareAndSwap)
	return f
}

func ptrTo[T any](v T) *T { return &v }

func (f *fakeAPI) compareAndSwap(a k8stesting.Action) (bool, runtime.Object, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var l *coordinationv1.Lease
	switch a.GetVerb() {
	case "create":
		l = a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease)
		l.UID = types.UID(fmt.Sprintf("uid-%d", f.next))
	case "update":
		l = a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		cur, err := f.client.Tracker().Get(leaseGVR, testNS, l.Name)
		if err != nil {
			return true, nil, err
		}
		if curRV := cur.(*coordinationv1.Lease).ResourceVersion; l.ResourceVersion != curRV {
			return true, nil, apierrors.NewConflict(leaseGVR.GroupResource(), l.Name, fmt.Errorf("resourceVersion %q, stored %q", l.ResourceVersion, curRV))
		}
	default:
		return false, nil, nil
	}
	f.next++
	l.ResourceVersion = fmt.Sprint(f.next)
	return false, nil, nil
}

// run starts a candidate; it stops at the end of the test.
func (f *fakeAPI) run(t *testing.T, id string) *election.Elector {
	t.Helper()
	e, err := election.New(election.Config{
		Client: clientset.Wrap(f.client), Namespace: testNS, Name: testLease, Identity: id,
		LeaseDuration: testLD, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond,
		ClockSkewMargin: 200 * time.Millisecond, Clock: f.clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(waitFor):
			t.Error("Run did not return")
		}
	})
	return e
}

// TestWatchOnTheRealElectorSaysNotLeaderWhenTheTokenRunsOut: the leader's
// renew hangs (the API server is cut off), so the election loop is stuck in
// that write and no Lease event comes. When the fake clock reaches the end
// of the token's validity, the stream says isLeader:false: only Changed,
// firing at ValidUntil, can have told it.
func TestWatchOnTheRealElectorSaysNotLeaderWhenTheTokenRunsOut(t *testing.T) {
	api := newFakeAPI()
	// The cut: once on, every Lease update hangs until the test ends and
	// then fails. Installed before the candidate starts: the fake clientset
	// reads its reactor chain without a lock of its own.
	var cutOff atomic.Bool
	gate, blocked := make(chan struct{}), make(chan struct{})
	var once sync.Once
	api.client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if !cutOff.Load() {
			return false, nil, nil
		}
		once.Do(func() { close(blocked) })
		<-gate
		return true, nil, apierrors.NewServiceUnavailable("cut off")
	})
	a := api.run(t, "a")
	// Registered after the candidate's Cleanup, so it runs first.
	t.Cleanup(func() { close(gate) })
	// A free Lease found at start is taken once it expires on a's clock.
	eventually(t, "a leads", func() bool {
		if !a.Status().IsLeader {
			api.clock.Step(50 * time.Millisecond)
		}
		return a.Status().IsLeader
	})
	h := NewHandler(a, nil, WithClock(testingclock.NewFakeClock(t0)))
	url, client := serve(t, h)
	s := openWatch(t, client, url, nil)
	_, first := s.nextLeader()
	if !first.IsLeader || first.Token != 2 {
		t.Fatalf("first event: %+v", first)
	}

	// The renew timer fires: the loop blocks in the write. A write already
	// in flight when the cut begins (the acquisition's follow-up) may still
	// land and move the validity, so it is read only once the loop is stuck.
	// The timer is stepped again only if no renew has blocked a second
	// after a step (the landed write set the timer anew after the step).
	cutOff.Store(true)
	var stepped time.Time
	eventually(t, "a renew blocks", func() bool {
		select {
		case <-blocked:
			return true
		default:
		}
		if time.Since(stepped) > time.Second {
			api.clock.Step(500 * time.Millisecond)
			stepped = time.Now()
		}
		return false
	})
	st := a.Status()
	if !st.IsLeader || !api.clock.Now().Before(st.ValidUntil) {
		t.Fatalf("before the end of the token: %+v at %v", st, api.clock.Now())
	}
	api.clock.SetTime(st.ValidUntil)
	for {
		_, r := s.nextLeader()
		if !r.IsLeader {
			if r.Token != 0 || r.ExpiresInMs != 0 || r.Holder != "a" {
				t.Fatalf("not-leader event: %+v", r)
			}
			break
		}
	}
	// The loop is still inside its write (the gate opens at cleanup): the
	// event came from the validity timer alone.
}

// TestLongPollOnTheRealElectorReturnsOnAHandoff: a follower's long-poll
// returns when the leader releases and when the follower takes over; a
// POST /release?for= on the leader keeps it out and shows why.
func TestLongPollOnTheRealElectorReturnsOnAHandoff(t *testing.T) {
	api := newFakeAPI()
	a := api.run(t, "a")
	// A free Lease found at start is taken once it expires on a's clock.
	eventually(t, "a leads", func() bool {
		if !a.Status().IsLeader {
			api.clock.Step(50 * time.Millisecond)
		}
		return a.Status().IsLeader
	})
	b := api.run(t, "b")
	eventually(t, "b sees a", func() bool { return b.Status().Holder == "a" })
	ha, hb := NewHandler(a, nil), NewHandler(b, nil, WithClock(testingclock.NewFakeClock(t0)))
	urlA, clientA := serve(t, ha)
	urlB, clientB := serve(t, hb)
	tag, _ := leaderNow(t, hb)
	poll := longPoll(context.Background(), clientB, urlB, "5m", tag)
	eventually(t, "b's long-poll waits", func() bool { return hb.waiters.Load() == 1 })

	resp, err := clientA.Post(urlA+"/release?for=1h", "", nil)
	if err != nil || resp.StatusCode != 204 {
		t.Fatalf("POST /release?for=1h: %v %v", resp, err)
	}
	_ = resp.Body.Close()
	got := answer(t, poll)
	if got.code != 200 || got.etag == tag {
		t.Fatalf("b's long-poll after the release: %d %s %s", got.code, got.etag, got.body)
	}
	// b saw the release happen: it writes after its draw in the contention
	// window (tens of ms on the fake clock), unless someone else wrote first.
	eventually(t, "b leads", func() bool {
		api.clock.Step(time.Millisecond)
		return b.Status().IsLeader
	})
	_, body := leaderNow(t, ha)
	sa := a.Status()
	if sa.Candidate || sa.NotCandidate != "released for 1h0m0s" {
		t.Fatalf("a after release?for=1h: %+v; body %s", sa, body)
	}
	// The countdown does not change a's ETag; b's does change with its term.
	tagA, _ := leaderNow(t, ha)
	api.clock.Step(2 * time.Second)
	eventually(t, "a's countdown moved", func() bool { return a.Status().NotCandidate != sa.NotCandidate })
	if now, _ := leaderNow(t, ha); now != tagA {
		t.Fatalf("a's ETag changed with the countdown alone: %s -> %s", tagA, now)
	}
}
