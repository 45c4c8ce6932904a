package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/elector-sidecar/elector-sidecar/pkg/client"
)

// term is one call of RunWhileLeading's fn: its token, and when and why
// its context ended.
type term struct {
	token int64
	ended time.Time
	cause error
}

// TestRunWhileLeadingEndsTheWorkBeforeAnotherPodLeads: an app next to a
// real sidecar (pod-a) runs its work with client.FromEnv ($ELECTOR_URL) and
// RunWhileLeading. pod-a leads: the work starts with its token. pod-a is
// SIGSTOPped (the sidecar hangs; renewals stop): the work's context ends,
// as the sidecar did not vouch for the token in time, before pod-b stamps
// the Lease's acquireTime for its own term (so before pod-b's token is
// valid). pod-a resumes as a follower (no work), and when pod-b is
// SIGTERMed, pod-a leads again and the work starts with the new token.
func TestRunWhileLeadingEndsTheWorkBeforeAnotherPodLeads(t *testing.T) {
	g := newGroup(t, testTimings)
	a := g.start("pod-a")[0]
	leader, tok := g.waitLeader(startupTimeout)
	if leader != a {
		t.Fatalf("leader %s, want pod-a", leader)
	}
	t.Setenv("ELECTOR_URL", a.URL)
	c, err := client.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if c.URL() != strings.TrimRight(a.URL, "/") {
		t.Fatalf("FromEnv: %s, want $ELECTOR_URL %s", c.URL(), a.URL)
	}
	var (
		mu    sync.Mutex
		terms []term
	)
	snapshot := func() []term {
		mu.Lock()
		defer mu.Unlock()
		return append([]term(nil), terms...)
	}
	ctx, stop := context.WithCancel(g.ctx)
	done := make(chan error, 1)
	go func() {
		done <- c.RunWhileLeading(ctx, func(ctx context.Context, tok client.Token) {
			mu.Lock()
			terms = append(terms, term{token: tok.Token})
			i := len(terms) - 1
			mu.Unlock()
			<-ctx.Done()
			mu.Lock()
			terms[i].ended, terms[i].cause = time.Now(), context.Cause(ctx)
			mu.Unlock()
		})
	}()
	defer func() {
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("RunWhileLeading returned %v, want context.Canceled", err)
		}
	}()
	g.waitFor(10*time.Second, fmt.Sprintf("the work started with token %d", tok.Token), func(context.Context) error {
		if ts := snapshot(); len(ts) != 1 || ts[0].token != tok.Token {
			return fmt.Errorf("terms so far %+v", ts)
		}
		return nil
	})

	b := g.start("pod-b")[0]
	g.waitAllSee(a, tok.Token)
	if err := a.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Resume() })
	g.waitFor(testTimings.LeaseDuration+failoverSlack, "the work's context to end", func(context.Context) error {
		if ts := snapshot(); ts[0].ended.IsZero() {
			return errors.New("still running")
		}
		return nil
	})
	first := snapshot()[0]
	if !errors.Is(first.cause, client.ErrLeadershipEnded) || !strings.Contains(first.cause.Error(), "did not vouch") {
		t.Fatalf("the work's context ended with %v, want ErrLeadershipEnded: the sidecar did not vouch in time", first.cause)
	}
	l, tokB := g.waitLeader(testTimings.LeaseDuration+failoverSlack, a)
	if l != b || tokB.Token <= tok.Token {
		t.Fatalf("leader %s with token %d after pod-a stopped, want pod-b with a token above %d", l, tokB.Token, tok.Token)
	}
	lease, err := env.cp.Client.CoordinationV1().Leases(g.namespace).Get(g.ctx, g.lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Spec.AcquireTime == nil || !first.ended.Before(lease.Spec.AcquireTime.Time) {
		t.Fatalf("the work's context ended at %s, not before pod-b's acquireTime %v", first.ended.Format(time.RFC3339Nano), lease.Spec.AcquireTime)
	}

	if err := a.Resume(); err != nil {
		t.Fatal(err)
	}
	g.waitAllSee(b, tokB.Token)
	if ts := snapshot(); len(ts) != 1 {
		t.Fatalf("the work ran again while pod-a follows: %+v", ts)
	}
	if err := b.Terminate(); err != nil {
		t.Fatal(err)
	}
	g.waitFor(testTimings.LeaseDuration+failoverSlack, "the work to start again with pod-a's new token", func(context.Context) error {
		ts := snapshot()
		if len(ts) != 2 || ts[1].token <= tokB.Token {
			return fmt.Errorf("terms so far %+v", ts)
		}
		return nil
	})
}
