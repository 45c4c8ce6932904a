package leaderlabel

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
	"github.com/elector-sidecar/elector-sidecar/pkg/kubeclient/clientset"
)

func leaderB(token int64) election.Status {
	return election.Status{IsLeader: true, HoldsLease: true, Token: token, Holder: "pod-b", Ready: true}
}

// TestLabelIsAddedAgainWhenANewTermStartsAfterAFailedRemoval: pod-a leads
// (token 2, labelled); its removal at the end of the term fails; pod-b leads
// (token 3) and removes pod-a's label as a former leader's; pod-a leads
// again (token 4): its pod is labelled for the new term, although it last
// believed the label was on.
func TestLabelIsAddedAgainWhenANewTermStartsAfterAFailedRemoval(t *testing.T) {
	a := newAPI(t, map[string]bool{"pod-a": false, "pod-b": false})
	la := newLabeler(t, a, "pod-a", nil)
	lb := newLabeler(t, a, "pod-b", nil)
	ctx := context.Background()
	if err := la.Sync(ctx, leader(2)); err != nil {
		t.Fatal(err)
	}
	a.fail("patch", "pod-a", errServer)
	if err := la.Sync(ctx, follower("pod-b")); err == nil {
		t.Fatal("want the failed removal")
	}
	if err := lb.Sync(ctx, leaderB(3)); err != nil {
		t.Fatal(err)
	}
	lb.BeforeRelease(ctx)
	if err := lb.Sync(ctx, follower("")); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the new term, then a renewal
		if err := la.Sync(ctx, leader(4)); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.labeled(); !slices.Equal(got, []string{"pod-a"}) {
		t.Errorf("pod-a leads (token 4) but the labelled pods are %v, want [pod-a]", got)
	}
}

// TestLabelIsAddedAgainWhenTermsCoalesce: pod-a's labeler sees token 2 and
// then token 4 with no pass in between (Run merges wake-ups), while pod-b's
// term 3 removed pod-a's label: the new term puts it back.
func TestLabelIsAddedAgainWhenTermsCoalesce(t *testing.T) {
	a := newAPI(t, map[string]bool{"pod-a": false, "pod-b": false})
	la := newLabeler(t, a, "pod-a", nil)
	lb := newLabeler(t, a, "pod-b", nil)
	ctx := context.Background()
	if err := la.Sync(ctx, leader(2)); err != nil {
		t.Fatal(err)
	}
	if err := lb.Sync(ctx, leaderB(3)); err != nil {
		t.Fatal(err)
	}
	lb.BeforeRelease(ctx)
	if err := la.Sync(ctx, leader(4)); err != nil {
		t.Fatal(err)
	}
	if got := a.labeled(); !slices.Equal(got, []string{"pod-a"}) {
		t.Errorf("pod-a leads (token 4) but the labelled pods are %v, want [pod-a]", got)
	}
}

// runLabeler runs a labeler of pod-a on a fake clock with src; it returns a
// func that stops Run and waits for it.
func runLabeler(t *testing.T, a *api, src *source, clk *testingclock.FakeClock) func() {
	t.Helper()
	l, err := New(Config{Client: clientset.Wrap(a.client), Namespace: ns, PodName: "pod-a", Key: key, Logger: quiet(), Clock: clk,
		ResyncPeriod: 30 * time.Second, Backoff: DefaultBackoff})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx, src) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// handPatch changes pod's label as kubectl label would (on the tracker, not
// through the labeler's calls).
func handPatch(t *testing.T, a *api, pod, patch string) {
	t.Helper()
	if _, err := a.client.CoreV1().Pods(ns).Patch(context.Background(), pod, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestLabelIsAddedAgainWithinAResyncAfterAHandRemoval: `kubectl label pod
// pod-a KEY-` while pod-a leads: the label is back after one resync period,
// with no change of the election.
func TestLabelIsAddedAgainWithinAResyncAfterAHandRemoval(t *testing.T) {
	a := newAPI(t, map[string]bool{"pod-a": false})
	clk := testingclock.NewFakeClock(t0)
	src := newSource(leader(2))
	runLabeler(t, a, src, clk)
	eventually(t, "pod-a labelled", func() bool { return slices.Equal(a.labeled(), []string{"pod-a"}) })
	handPatch(t, a, "pod-a", removeBody)
	if got := a.labeled(); len(got) != 0 {
		t.Fatalf("labelled %v after the hand removal", got)
	}
	clk.Step(30 * time.Second)
	eventually(t, "pod-a labelled again after the resync", func() bool { return slices.Equal(a.labeled(), []string{"pod-a"}) })
}

// TestHandAddedLabelLeavesAFollowerAtTheLeadersResync: a label added by
// hand to a pod that does not lead is removed at the leader's next resync.
func TestHandAddedLabelLeavesAFollowerAtTheLeadersResync(t *testing.T) {
	a := newAPI(t, map[string]bool{"pod-a": false, "pod-b": false})
	clk := testingclock.NewFakeClock(t0)
	runLabeler(t, a, newSource(leader(2)), clk)
	eventually(t, "pod-a labelled", func() bool { return slices.Equal(a.labeled(), []string{"pod-a"}) })
	handPatch(t, a, "pod-b", addBody)
	clk.Step(30 * time.Second)
	eventually(t, "the hand-added label removed from pod-b", func() bool { return slices.Equal(a.labeled(), []string{"pod-a"}) })
}

// TestPassThatOutlastsBeforeReleaseLeavesNoLabel: a pass reads "leading",
// then waits on a slow List; the election steps down and BeforeRelease
// cannot wait for the pass (its context ends). The pass must not leave the
// label on the pod that released the Lease.
func TestPassThatOutlastsBeforeReleaseLeavesNoLabel(t *testing.T) {
	a := newAPI(t, map[string]bool{"pod-a": false, "pod-b": true})
	l := newLabeler(t, a, "pod-a", nil)
	entered, unblock := make(chan struct{}), make(chan struct{})
	var once sync.Once
	prependReactor(&a.client.Fake, "list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		once.Do(func() { close(entered) })
		<-unblock // a slow List (API latency)
		return false, nil, nil
	})
	var st atomic.Value
	st.Store(leader(2))
	done := make(chan error, 1)
	go func() {
		done <- l.sync(context.Background(), func() election.Status { return st.Load().(election.Status) })
	}()
	<-entered
	st.Store(follower("")) // the token stops
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // BeforeRelease's context ends before the pass lets go
	l.BeforeRelease(ctx)
	close(unblock) // the Lease has been written free; the List returns
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := a.labeled(); slices.Contains(got, "pod-a") {
		t.Errorf("pod-a released the Lease but the pass left it labelled: %v", got)
	}
}

// TestLabelAddedAsTheTermEndsIsTakenOffAgain: the term ends while the add
// patch is in flight: the pass takes the label off again.
func TestLabelAddedAsTheTermEndsIsTakenOffAgain(t *testing.T) {
	a := newAPI(t, map[string]bool{"pod-a": false})
	l := newLabeler(t, a, "pod-a", nil)
	var st atomic.Value
	st.Store(leader(2))
	prependReactor(&a.client.Fake, "patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		st.Store(follower("")) // the token stops during the add
		return false, nil, nil
	})
	if err := l.sync(context.Background(), func() election.Status { return st.Load().(election.Status) }); err != nil {
		t.Fatal(err)
	}
	if got := a.labeled(); len(got) != 0 {
		t.Errorf("the term ended during the add, yet %v stay labelled", got)
	}
}

// TestRunRemovesTheLabelWhenItStops: the removal at the end of the term
// failed and its retry is pending when Run stops (shutdown, after the
// release): Run removes the label before it returns.
func TestRunRemovesTheLabelWhenItStops(t *testing.T) {
	a := newAPI(t, map[string]bool{"pod-a": false})
	clk := testingclock.NewFakeClock(t0)
	src := newSource(leader(2))
	stop := runLabeler(t, a, src, clk)
	eventually(t, "pod-a labelled", func() bool { return slices.Equal(a.labeled(), []string{"pod-a"}) })
	a.fail("patch", "pod-a", errServer)
	src.set(follower(""))
	eventually(t, "the failed removal", func() bool { return a.pending("patch", "pod-a") == 0 })
	stop()
	if got := a.labeled(); len(got) != 0 {
		t.Errorf("Run stopped and left %v labelled", got)
	}
}

// TestRunKeepsTheLabelWhenItStopsWhileLeading: stopping the labeler alone
// (the election still runs and leads) leaves the leader's label.
func TestRunKeepsTheLabelWhenItStopsWhileLeading(t *testing.T) {
	a := newAPI(t, map[string]bool{"pod-a": false})
	clk := testingclock.NewFakeClock(t0)
	stop := runLabeler(t, a, newSource(leader(2)), clk)
	eventually(t, "pod-a labelled", func() bool { return slices.Equal(a.labeled(), []string{"pod-a"}) })
	stop()
	if got := a.labeled(); !slices.Equal(got, []string{"pod-a"}) {
		t.Errorf("labelled %v after stopping while leading, want [pod-a]", got)
	}
}
