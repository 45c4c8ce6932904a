package election

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/elector-sidecar/elector-sidecar/pkg/kubeclient/clientset"
)

const (
	ns        = "team"
	leaseName = "billing"
	ld        = 3 * time.Second
	rd        = 2 * time.Second
	rp        = 500 * time.Millisecond
	skew      = 200 * time.Millisecond
)

var leaseGVR = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}

// fakeAPI is a fake clientset that behaves like the API server where the
// election depends on it: every write gets a new resourceVersion, an update
// whose resourceVersion is not the stored one is a Conflict, and a create
// gets a fresh UID.
type fakeAPI struct {
	t      *testing.T
	client *fake.Clientset
	clock  *testingclock.FakeClock
	mu     sync.Mutex
	next   int
	// mutate, if set, changes every candidate's Config before New.
	mutate func(*Config)
}

func newFakeAPI(t *testing.T, objs ...runtime.Object) *fakeAPI {
	t.Helper()
	f := &fakeAPI{t: t, client: fake.NewClientset(objs...), clock: testingclock.NewFakeClock(t0), next: 100}
	f.client.PrependReactor("*", "leases", f.compareAndSwap)
	return f
}

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
		cur, err := f.client.Tracker().Get(leaseGVR, ns, l.Name)
		if err != nil {
			return true, nil, err
		}
		if curRV := cur.(*coordinationv1.Lease).ResourceVersion; l.ResourceVersion != curRV {
			return true, nil, apierrors.NewConflict(leaseGVR.GroupResource(), l.Name, fmt.Errorf("resourceVersion %q, stored %q", l.ResourceVersion, curRV))
		}
	case "patch":
		pa := a.(k8stesting.PatchAction)
		cur, err := f.client.Tracker().Get(leaseGVR, ns, pa.GetName())
		if err != nil {
			return true, nil, err
		}
		if l, err = mergeAnnotations(cur.(*coordinationv1.Lease), pa.GetPatch()); err != nil {
			return true, nil, err
		}
		f.next++
		l.ResourceVersion = fmt.Sprint(f.next)
		if err := f.client.Tracker().Update(leaseGVR, l, ns); err != nil {
			return true, nil, err
		}
		return true, l.DeepCopy(), nil
	default:
		return false, nil, nil
	}
	f.next++
	l.ResourceVersion = fmt.Sprint(f.next)
	return false, nil, nil
}

// lease returns the stored Lease, nil if there is none.
func (f *fakeAPI) lease() *coordinationv1.Lease {
	f.t.Helper()
	o, err := f.client.Tracker().Get(leaseGVR, ns, leaseName)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		f.t.Fatalf("get lease: %v", err)
	}
	return o.(*coordinationv1.Lease)
}

func (f *fakeAPI) deleteLease() {
	f.t.Helper()
	if err := f.client.Tracker().Delete(leaseGVR, ns, leaseName); err != nil {
		f.t.Fatalf("delete lease: %v", err)
	}
}

// calls returns the Lease writes ("create", "update", "patch") and reads ("get")
// made since the last call: tests assert exactly the calls they expect.
func (f *fakeAPI) calls() []string {
	var out []string
	for _, a := range f.client.Actions() {
		if a.GetResource().Resource == "leases" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			out = append(out, a.GetVerb())
		}
	}
	f.client.ClearActions()
	return out
}

// fail makes the next n calls with verb fail with err (n < 0: all).
func (f *fakeAPI) fail(verb string, n int, err error) {
	var mu sync.Mutex
	prependReactor(&f.client.Fake, verb, "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if n == 0 {
			return false, nil, nil
		}
		n--
		return true, nil, err
	})
}

// prependReactor puts fn at the head of f's reactor chain under f's lock:
// PrependReactor alone writes the chain without it, while a running
// candidate's call reads the chain under it (Fake.Invokes).
func prependReactor(f *k8stesting.Fake, verb, resource string, fn k8stesting.ReactionFunc) {
	f.Lock()
	defer f.Unlock()
	f.PrependReactor(verb, resource, fn)
}

func heldLease(holder string, transitions int32) *coordinationv1.Lease {
	now := metav1.NewMicroTime(t0)
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: leaseName, Namespace: ns, UID: "uid-1", ResourceVersion: "5"},
		Spec: coordinationv1.LeaseSpec{
			LeaseDurationSeconds: ptr(int32(3)), AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr(transitions),
		},
	}
	if holder != "" {
		l.Spec.HolderIdentity = ptr(holder)
	}
	return l
}

// newElector builds a candidate on the fake API; it does not run.
func (f *fakeAPI) newElector(id string, clk clock.WithTicker) (*Elector, *record.FakeRecorder, *prometheus.Registry) {
	f.t.Helper()
	reg := prometheus.NewRegistry()
	events := record.NewFakeRecorder(1000)
	cfg := Config{
		Client: clientset.Wrap(f.client), Namespace: ns, Name: leaseName, Identity: id,
		LeaseDuration: ld, RenewDeadline: rd, RetryPeriod: rp, ClockSkewMargin: skew,
		Clock: clk, Logger: testLogger(), Registerer: reg, Recorder: events,
	}
	if f.mutate != nil {
		f.mutate(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		f.t.Fatalf("New(%s): %v", id, err)
	}
	// Draw 0: no contention delay, so tests see each step at once
	// (contend_test.go sets real draws).
	e.draw = func() float64 { return 0 }
	return e, events, reg
}

func testLogger() *slog.Logger {
	if os.Getenv("ELECTOR_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// waitOutFreeLease moves the clock past the expiry of a free Lease the
// candidates found at start (and past any contention window): with no
// release seen, it is treated as held until then.
func (f *fakeAPI) waitOutFreeLease() { f.clock.Step(ld + rp) }

// stepped is a candidate driven by the test, one step at a time, with no
// goroutines: the test hands it the informer's events and runs the loop's
// body (decide, execute) until nothing is due.
type stepped struct {
	*Elector
	f      *fakeAPI
	events *record.FakeRecorder
}

func (f *fakeAPI) stepped(id string) *stepped {
	e, events, _ := f.newElector(id, f.clock)
	e.alive.Store(true)
	return &stepped{Elector: e, f: f, events: events}
}

// sees hands the candidate an informer event for l (as stored now).
func (c *stepped) sees(l *coordinationv1.Lease) *stepped {
	c.deliver(observation{lease: l.DeepCopy()})
	c.drainInbox()
	c.publish()
	return c
}

// seesStored hands the candidate the stored Lease as an informer event,
// or its absence as the initial list.
func (c *stepped) seesStored() *stepped {
	if l := c.f.lease(); l != nil {
		c.sees(l)
	}
	return c.synced()
}

func (c *stepped) seesDeleted(last *coordinationv1.Lease) *stepped {
	c.deliver(observation{lease: last.DeepCopy(), deleted: true})
	c.drainInbox()
	c.publish()
	return c
}

func (c *stepped) synced() *stepped {
	c.deliver(observation{synced: true})
	c.drainInbox()
	c.publish()
	return c
}

// step runs the loop's body once at the fake clock's time and returns the
// next wake-up.
func (c *stepped) step() time.Time {
	wake := c.process(context.Background(), context.Background())
	c.publish()
	return wake
}

// tokenLog checks the fencing token's promises across candidates on the
// shared fake clock: a token value is served by one process only (a
// process is one incarnation: twins are two), valid tokens never overlap,
// and no process serves a token while an answer another process gave its
// app still claims validity (expiresInMs), unless that app gave it back.
type tokenLog struct {
	t      *testing.T
	owner  map[int64]string
	claims map[string]claim // by process: its latest answer's claim
}

// claim is the latest token answer a process handed its app.
type claim struct {
	name  string
	token int64
	until time.Time
}

func newTokenLog(t *testing.T) *tokenLog {
	return &tokenLog{t: t, owner: map[int64]string{}, claims: map[string]claim{}}
}

// processOf names a candidate's process: its identity and incarnation.
func processOf(c *stepped) string { return c.cfg.Identity + "#" + c.st.incarnation }

// gaveBack: c's app gave its token back (POST /release) or has exited:
// its answers no longer claim anything.
func (l *tokenLog) gaveBack(c *stepped) { delete(l.claims, processOf(c)) }

func (l *tokenLog) check(cands ...*stepped) {
	l.t.Helper()
	var leaders []string
	now := cands[0].clock.Now()
	for _, c := range cands {
		s := c.Status()
		if !s.IsLeader {
			continue
		}
		p := processOf(c)
		leaders = append(leaders, fmt.Sprintf("%s(token %d, uid %s)", s.Identity, s.Token, s.LeaseUID))
		if o, ok := l.owner[s.Token]; ok && o != p {
			l.t.Fatalf("token %d served by %s and by %s", s.Token, o, p)
		}
		l.owner[s.Token] = p
		for q, cl := range l.claims {
			if q != p && now.Before(cl.until) {
				l.t.Fatalf("%s serves token %d while %s's answer (token %d) claims validity for %v more", p, s.Token, cl.name, cl.token, cl.until.Sub(now))
			}
		}
		l.claims[p] = claim{name: p, token: s.Token, until: now.Add(s.ExpiresIn)}
	}
	if len(leaders) > 1 {
		l.t.Fatalf("two valid tokens at once: %v", leaders)
	}
}
