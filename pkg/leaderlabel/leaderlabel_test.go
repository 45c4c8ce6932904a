package leaderlabel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
	"github.com/elector-sidecar/elector-sidecar/pkg/kubeclient/clientset"
)

const (
	ns  = "team"
	key = DefaultKey
)

var (
	podsGR = schema.GroupResource{Resource: "pods"}
	t0     = time.Unix(1_800_000_000, 0)
)

// The exact patch bodies: a JSON merge patch of this one label.
const (
	addBody    = `{"metadata":{"labels":{"elector-sidecar.io/leader":"true"}}}`
	removeBody = `{"metadata":{"labels":{"elector-sidecar.io/leader":null}}}`
)

// api is a fake clientset holding pods, with a catch-all reactor that
// records every call as one line ("get pod-a", "list elector-sidecar.io/leader=true",
// "patch pod-b merge {...}") and can fail the next calls of a verb on a pod.
type api struct {
	t      *testing.T
	client *fake.Clientset
	mu     sync.Mutex
	log    []string
	fails  map[string][]error // "verb name" -> errors for the next calls
}

func newAPI(t *testing.T, labeled map[string]bool) *api {
	t.Helper()
	var objs []runtime.Object
	for name, on := range labeled {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "billing"}}}
		if on {
			p.Labels[key] = Value
		}
		objs = append(objs, p)
	}
	a := &api{t: t, client: fake.NewClientset(objs...), fails: map[string][]error{}}
	a.client.PrependReactor("*", "*", a.record)
	return a
}

func (a *api) record(act k8stesting.Action) (bool, runtime.Object, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var line, name string
	switch act.GetVerb() {
	case "get":
		name = act.(k8stesting.GetAction).GetName()
		line = "get " + name
	case "list":
		line = "list " + act.(k8stesting.ListAction).GetListRestrictions().Labels.String()
	case "patch":
		p := act.(k8stesting.PatchAction)
		name = p.GetName()
		line = fmt.Sprintf("patch %s %s %s", name, p.GetPatchType(), p.GetPatch())
	default:
		line = act.GetVerb() + " " + act.GetResource().Resource
	}
	if act.GetResource().Resource != "pods" || act.GetNamespace() != ns {
		a.t.Errorf("call outside pods in %s: %s %s/%s", ns, act.GetVerb(), act.GetNamespace(), act.GetResource().Resource)
	}
	a.log = append(a.log, line)
	k := act.GetVerb() + " " + name
	if errs := a.fails[k]; len(errs) > 0 {
		a.fails[k] = errs[1:]
		if errs[0] != nil {
			return true, nil, errs[0]
		}
	}
	return false, nil, nil
}

// calls returns the calls since the last call of calls.
func (a *api) calls() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.log
	a.log = nil
	return out
}

// pending returns how many queued failures of verb on name are left.
func (a *api) pending(verb, name string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.fails[verb+" "+name])
}

// fail makes the next calls of verb on name fail with errs in turn (a nil
// lets that call through).
func (a *api) fail(verb, name string, errs ...error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fails[verb+" "+name] = append(a.fails[verb+" "+name], errs...)
}

// labeled returns the names of the pods that carry the label, sorted.
func (a *api) labeled() []string {
	a.t.Helper()
	list, err := a.client.Tracker().List(corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithKind("Pod"), ns)
	if err != nil {
		a.t.Fatal(err)
	}
	var out []string
	for _, p := range list.(*corev1.PodList).Items {
		if p.Labels[key] == Value {
			out = append(out, p.Name)
		}
		if p.Labels["app"] != "billing" {
			a.t.Errorf("pod %s lost its other labels: %v", p.Name, p.Labels)
		}
	}
	slices.Sort(out)
	return out
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newLabeler(t *testing.T, a *api, self string, reg prometheus.Registerer) *Labeler {
	t.Helper()
	l, err := New(Config{Client: clientset.Wrap(a.client), Namespace: ns, PodName: self, Key: key, Logger: quiet(), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func leader(token int64) election.Status {
	return election.Status{IsLeader: true, HoldsLease: true, Token: token, Holder: "pod-a", Ready: true}
}

func follower(holder string) election.Status {
	return election.Status{Holder: holder, Ready: true}
}

var errServer = apierrors.NewInternalError(errors.New("etcd timeout"))

func TestSyncPatchesExactlyTheLabel(t *testing.T) {
	type step struct {
		status    election.Status
		wantErr   bool
		wantCalls []string
	}
	tests := []struct {
		name        string
		pods        map[string]bool // name -> labeled
		fails       map[string][]error
		steps       []step
		wantLabeled []string
	}{
		{
			name: "a starting follower reads its pod and writes nothing",
			pods: map[string]bool{"pod-a": false, "pod-b": true},
			steps: []step{
				{status: follower("pod-b"), wantCalls: []string{"get pod-a"}},
				{status: follower("pod-b")},
			},
			wantLabeled: []string{"pod-b"},
		},
		{
			name: "a starting sidecar removes a stale label from its own pod",
			pods: map[string]bool{"pod-a": true, "pod-b": false},
			steps: []step{
				{status: follower("pod-b"), wantCalls: []string{"get pod-a", "patch pod-a application/merge-patch+json " + removeBody}},
				{status: follower("pod-b")},
			},
		},
		{
			name: "a new leader removes the old holder's label and labels its own pod",
			pods: map[string]bool{"pod-a": false, "pod-b": true, "pod-c": false},
			steps: []step{
				{status: follower("pod-b"), wantCalls: []string{"get pod-a"}},
				{status: leader(2), wantCalls: []string{
					"list elector-sidecar.io/leader=true",
					"patch pod-b application/merge-patch+json " + removeBody,
					"get pod-a", // a new term reads the own pod as it is
					"patch pod-a application/merge-patch+json " + addBody,
				}},
				{status: leader(2)}, // renewals: nothing to do
			},
			wantLabeled: []string{"pod-a"},
		},
		{
			name: "a leader that loses its term removes its label",
			pods: map[string]bool{"pod-a": false, "pod-b": false},
			steps: []step{
				{status: leader(2), wantCalls: []string{"list elector-sidecar.io/leader=true", "get pod-a", "patch pod-a application/merge-patch+json " + addBody}},
				{status: follower("pod-b"), wantCalls: []string{"patch pod-a application/merge-patch+json " + removeBody}},
				{status: follower("pod-b")},
			},
		},
		{
			name: "every new term cleans the other pods and reads the own pod again",
			pods: map[string]bool{"pod-a": false, "pod-b": false},
			steps: []step{
				{status: leader(2), wantCalls: []string{"list elector-sidecar.io/leader=true", "get pod-a", "patch pod-a application/merge-patch+json " + addBody}},
				{status: leader(3), wantCalls: []string{"list elector-sidecar.io/leader=true", "get pod-a"}},
			},
			wantLabeled: []string{"pod-a"},
		},
		{
			name:  "a failed patch fails the pass and the next pass reads the pod and makes it again",
			pods:  map[string]bool{"pod-a": false},
			fails: map[string][]error{"patch pod-a": {errServer}},
			steps: []step{
				{status: leader(2), wantErr: true, wantCalls: []string{"list elector-sidecar.io/leader=true", "get pod-a", "patch pod-a application/merge-patch+json " + addBody}},
				{status: leader(2), wantCalls: []string{"get pod-a", "patch pod-a application/merge-patch+json " + addBody}},
				{status: leader(2)},
			},
			wantLabeled: []string{"pod-a"},
		},
		{
			name:  "a failed removal from the old holder is retried before the own label",
			pods:  map[string]bool{"pod-a": false, "pod-b": true},
			fails: map[string][]error{"patch pod-b": {errServer}},
			steps: []step{
				{status: leader(2), wantErr: true, wantCalls: []string{"list elector-sidecar.io/leader=true", "patch pod-b application/merge-patch+json " + removeBody}},
				{status: leader(2), wantCalls: []string{
					"list elector-sidecar.io/leader=true",
					"patch pod-b application/merge-patch+json " + removeBody,
					"get pod-a",
					"patch pod-a application/merge-patch+json " + addBody,
				}},
			},
			wantLabeled: []string{"pod-a"},
		},
		{
			name:  "a failed read of the own pod at start is retried",
			pods:  map[string]bool{"pod-a": true},
			fails: map[string][]error{"get pod-a": {errServer}},
			steps: []step{
				{status: follower(""), wantErr: true, wantCalls: []string{"get pod-a"}},
				{status: follower(""), wantCalls: []string{"get pod-a", "patch pod-a application/merge-patch+json " + removeBody}},
			},
		},
		{
			name:  "an old holder's pod that is gone (404) needs nothing and is not retried",
			pods:  map[string]bool{"pod-a": false, "pod-b": true},
			fails: map[string][]error{"patch pod-b": {apierrors.NewNotFound(podsGR, "pod-b")}},
			steps: []step{
				{status: leader(2), wantCalls: []string{
					"list elector-sidecar.io/leader=true",
					"patch pod-b application/merge-patch+json " + removeBody,
					"get pod-a",
					"patch pod-a application/merge-patch+json " + addBody,
				}},
				{status: leader(2)},
			},
			wantLabeled: []string{"pod-a", "pod-b"}, // the fake still has it; the API server said 404
		},
		{
			name: "no pod of our own (404): nothing to write, no retries",
			pods: map[string]bool{"pod-b": false},
			steps: []step{
				{status: leader(2), wantCalls: []string{"list elector-sidecar.io/leader=true", "get pod-a"}},
				{status: follower("pod-b")},
				{status: leader(3), wantCalls: []string{"list elector-sidecar.io/leader=true"}},
			},
		},
		{
			name:  "our pod deleted while we lead (404 on the patch): not retried",
			pods:  map[string]bool{"pod-a": false},
			fails: map[string][]error{"patch pod-a": {nil, apierrors.NewNotFound(podsGR, "pod-a")}},
			steps: []step{
				{status: leader(2), wantCalls: []string{"list elector-sidecar.io/leader=true", "get pod-a", "patch pod-a application/merge-patch+json " + addBody}},
				{status: follower("pod-b"), wantCalls: []string{"patch pod-a application/merge-patch+json " + removeBody}},
				{status: leader(3), wantCalls: []string{"list elector-sidecar.io/leader=true"}},
			},
			wantLabeled: []string{"pod-a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAPI(t, tt.pods)
			for k, errs := range tt.fails {
				verb, name, _ := strings.Cut(k, " ")
				a.fail(verb, name, errs...)
			}
			l := newLabeler(t, a, "pod-a", nil)
			for i, s := range tt.steps {
				err := l.Sync(context.Background(), s.status)
				if (err != nil) != s.wantErr {
					t.Fatalf("step %d (leader=%v token=%d): err = %v, want error %v", i, s.status.IsLeader, s.status.Token, err, s.wantErr)
				}
				if got := a.calls(); !slices.Equal(got, s.wantCalls) {
					t.Fatalf("step %d (leader=%v token=%d) calls:\n got  %q\n want %q", i, s.status.IsLeader, s.status.Token, got, s.wantCalls)
				}
			}
			if got := a.labeled(); !slices.Equal(got, tt.wantLabeled) {
				t.Errorf("labeled pods %v, want %v", got, tt.wantLabeled)
			}
		})
	}
}

func TestBeforeReleaseRemovesTheLabelWithinItsContext(t *testing.T) {
	a := newAPI(t, map[string]bool{"pod-a": false})
	reg := prometheus.NewRegistry()
	l := newLabeler(t, a, "pod-a", reg)
	if err := l.Sync(context.Background(), leader(2)); err != nil {
		t.Fatal(err)
	}
	a.calls()
	// The first removal fails: BeforeRelease retries within its context.
	a.fail("patch", "pod-a", errServer)
	ctx, cancel := context.WithTimeout(context.Background(), election.BeforeReleaseTimeout)
	defer cancel()
	l.BeforeRelease(ctx)
	// After the failure it reads the pod again: the patch may have landed.
	want := []string{"patch pod-a application/merge-patch+json " + removeBody, "get pod-a", "patch pod-a application/merge-patch+json " + removeBody}
	if got := a.calls(); !slices.Equal(got, want) {
		t.Fatalf("calls %q, want %q", got, want)
	}
	if got := a.labeled(); len(got) != 0 {
		t.Fatalf("labeled %v after BeforeRelease", got)
	}
	// The pass after the release has nothing left to do.
	if err := l.Sync(context.Background(), follower("pod-b")); err != nil {
		t.Fatal(err)
	}
	if got := a.calls(); len(got) != 0 {
		t.Fatalf("calls after the release %q", got)
	}
	for op, want := range map[[2]string]float64{{"add", "ok"}: 1, {"remove", "ok"}: 1, {"remove", "error"}: 1, {"remove", "not_found"}: 0} {
		if got := testutil.ToFloat64(l.patches.WithLabelValues(op[0], op[1])); got != want {
			t.Errorf("elector_leader_label_patches_total{op=%q,result=%q} = %v, want %v", op[0], op[1], got, want)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "elector_leader_label_patches_total"); err != nil || n != 6 {
		t.Errorf("registered series: %d (%v), want 6", n, err)
	}
}

func TestBeforeReleaseGivesUpWhenItsContextEnds(t *testing.T) {
	a := newAPI(t, map[string]bool{"pod-a": true})
	l := newLabeler(t, a, "pod-a", nil)
	if err := l.Sync(context.Background(), leader(2)); err != nil {
		t.Fatal(err)
	}
	a.calls()
	var attempts atomic.Int64
	prependReactor(&a.client.Fake, "patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		attempts.Add(1)
		return true, nil, errServer
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	l.BeforeRelease(ctx)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("BeforeRelease took %v with a 100ms context", d)
	}
	if n := attempts.Load(); n < 2 {
		t.Fatalf("%d patch attempts in 100ms, want retries", n)
	}
}

// source is a Source the test sets.
type source struct {
	mu      sync.Mutex
	st      election.Status
	changed chan struct{}
}

func newSource(st election.Status) *source { return &source{st: st, changed: make(chan struct{})} }

func (s *source) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

func (s *source) Status() election.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

func (s *source) set(st election.Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st = st
	close(s.changed)
	s.changed = make(chan struct{})
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestRunFollowsChangesAndRetriesFailuresAfterABackOff(t *testing.T) {
	a := newAPI(t, map[string]bool{"pod-a": false, "pod-b": true})
	clk := testingclock.NewFakeClock(t0)
	l, err := New(Config{Client: clientset.Wrap(a.client), Namespace: ns, PodName: "pod-a", Key: key, Logger: quiet(), Clock: clk,
		Backoff: wait.Backoff{Duration: time.Second, Factor: 2, Steps: 10, Cap: 4 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	src := newSource(follower("pod-b"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx, src) }()
	defer func() { cancel(); <-done }()

	labeled := func(want ...string) func() bool {
		return func() bool { return slices.Equal(a.labeled(), want) }
	}
	// The old holder's label stays until this pod leads; then it moves.
	eventually(t, "the first pass", func() bool { return len(a.calls()) == 1 })
	a.fail("patch", "pod-a", errServer, errServer)
	src.set(leader(2))
	eventually(t, "pod-b unlabeled", labeled())
	// Two failed patches of pod-a: retried after 1s, then after 2s of the fake clock.
	// The clock's waiters: the resync ticker, and the retry timer.
	eventually(t, "the first retry timer", func() bool { return clk.Waiters() == 2 })
	if got := a.labeled(); len(got) != 0 {
		t.Fatalf("labeled %v before the retry", got)
	}
	clk.Step(time.Second)
	eventually(t, "the second retry timer", func() bool { return clk.Waiters() == 2 && a.pending("patch", "pod-a") == 0 })
	clk.Step(1500 * time.Millisecond)
	if got := a.labeled(); len(got) != 0 {
		t.Fatalf("labeled %v before the second back-off (2s) ended", got)
	}
	clk.Step(500 * time.Millisecond)
	eventually(t, "pod-a labeled", labeled("pod-a"))

	// An involuntary loss (the token ran out): the label goes on Changed.
	src.set(follower(""))
	eventually(t, "pod-a unlabeled", labeled())
}

// prependReactor puts fn at the head of f's reactor chain under f's lock:
// PrependReactor alone writes the chain without it, while a running
// candidate's call reads the chain under it (Fake.Invokes).
func prependReactor(f *k8stesting.Fake, verb, resource string, fn k8stesting.ReactionFunc) {
	f.Lock()
	defer f.Unlock()
	f.PrependReactor(verb, resource, fn)
}
