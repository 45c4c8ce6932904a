package integration

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// The apiserver stopped for longer than renewDeadline: the
// leader stops serving /token before leaseDuration has passed since its last
// successful renew; after the restart, exactly one leader again, token greater.
func TestAPIServerOutage(t *testing.T) {
	g := newGroup(t, testTimings)
	t.Cleanup(func() {
		if err := env.cp.StartAPIServer(); err != nil {
			t.Errorf("restarting the apiserver in cleanup: %v", err)
		}
	})
	g.start("pod-a", "pod-b", "pod-c")
	leader, tok := g.waitLeader(startupTimeout)
	g.waitAllSee(leader, tok.Token)
	before, err := env.cp.GetLease(g.ctx, g.namespace, g.lease)
	if err != nil {
		t.Fatal(err)
	}

	stopBegin := time.Now()
	if err := env.cp.StopAPIServer(0); err != nil {
		t.Fatal(err)
	}
	// The process has exited: no renewal can succeed after this instant, so
	// the leader's last successful renew is before it.
	down := time.Now()
	deadline := down.Add(testTimings.LeaseDuration)
	outage := testTimings.LeaseDuration + 3*time.Second
	time.Sleep(outage) // the scenario: the apiserver stays down this long (the sampler keeps asking /token meanwhile)
	restartBegin := time.Now()
	if err := env.cp.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	t.Logf("apiserver: stopping took %v, down for %v, restart took %v", down.Sub(stopBegin).Round(time.Millisecond),
		restartBegin.Sub(down).Round(time.Millisecond), up.Sub(restartBegin).Round(time.Millisecond))

	// Every /token call sent at or after down+leaseDuration and answered
	// before the restart began must have been refused, by every process.
	var lastValid time.Time
	checked := 0
	for _, s := range g.Sampler.Samples() {
		if s.Valid() && s.Target == leader.Instance && s.Sent.Before(restartBegin) && s.Received.After(lastValid) {
			lastValid = s.Received
		}
		if s.Sent.Before(deadline) || s.Received.After(restartBegin) {
			continue
		}
		checked++
		if s.Valid() {
			t.Errorf("%s served %s at %v after the apiserver went down (leaseDuration %v)", s.Target, s.TokenResult, s.Sent.Sub(down).Round(time.Millisecond), testTimings.LeaseDuration)
		}
	}
	if checked < 10 {
		t.Fatalf("only %d samples in the window that must be token-free", checked)
	}
	if lastValid.IsZero() || lastValid.Before(stopBegin) {
		t.Fatalf("the leader served no token after the stop began (last: %v before it): the check above proved nothing", stopBegin.Sub(lastValid))
	}
	t.Logf("leader %s (token %d) served its last token %v after the stop began, %v before the apiserver process was gone (renewDeadline %v, leaseDuration %v); %d samples in [gone+leaseDuration, restart] all refused",
		leader.Instance, tok.Token, lastValid.Sub(stopBegin).Round(time.Millisecond), down.Sub(lastValid).Round(time.Millisecond),
		testTimings.RenewDeadline, testTimings.LeaseDuration, checked)

	// The Lease's history since before the outage (a watch from the
	// resourceVersion read before it) holds the leader's last successful
	// renewal: its renewTime is the leader's clock when it sent it. No token
	// may be served leaseDuration after that (one machine, one wall clock).
	lastRenew := lastRenewOf(t, g, before, leader.Identity(), tok.Token)
	limit := lastRenew.Add(testTimings.LeaseDuration)
	for _, s := range g.Sampler.Samples() {
		if s.Valid() && s.Target == leader.Instance && s.Token == tok.Token && !s.Sent.Round(0).Before(limit) {
			t.Errorf("%s served token %d at %v after its last successful renew (leaseDuration %v)", s.Target, s.Token, s.Sent.Round(0).Sub(lastRenew), testTimings.LeaseDuration)
		}
	}
	t.Logf("last successful renew %v after the stop began; last token served %v after that renew (renewDeadline %v, leaseDuration %v)",
		lastRenew.Sub(stopBegin.Round(0)).Round(time.Millisecond), lastValid.Round(0).Sub(lastRenew).Round(time.Millisecond), testTimings.RenewDeadline, testTimings.LeaseDuration)

	// Back: exactly one leader, with a greater token.
	next, ntok := g.waitLeader(30 * time.Second)
	t.Logf("after the restart %s leads with token %d, %v after the apiserver was healthy", next.Instance, ntok.Token, time.Since(up).Round(time.Millisecond))
	if ntok.Token <= tok.Token {
		t.Fatalf("token after the outage %d is not greater than %d", ntok.Token, tok.Token)
	}
	g.waitFor(10*time.Second, "exactly one leader after the outage", g.exactlyOneLeader)
	holder, transitions := g.leaseState()
	if holder != next.Identity() || transitions != ntok.Token {
		t.Fatalf("Lease holder %q transitions %d, want %s %d", holder, transitions, next.Identity(), ntok.Token)
	}
}

// lastRenewOf replays the Lease's changes since before and returns the last
// renewTime written while holder held it with token.
func lastRenewOf(t *testing.T, g *electionGroup, before *coordinationv1.Lease, holder string, token int64) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(g.ctx, 5*time.Second)
	defer cancel()
	w, err := env.cp.Client.CoordinationV1().Leases(g.namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector:   "metadata.name=" + g.lease,
		ResourceVersion: before.ResourceVersion,
	})
	if err != nil {
		t.Fatalf("watch the Lease from resourceVersion %s: %v", before.ResourceVersion, err)
	}
	defer w.Stop()
	var last time.Time
	if h, tr := framework.LeaseHolder(before); h == holder && tr == token && before.Spec.RenewTime != nil {
		last = before.Spec.RenewTime.Time
	}
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return checkLast(t, last)
			}
			l, isLease := ev.Object.(*coordinationv1.Lease)
			if !isLease || (ev.Type != watch.Added && ev.Type != watch.Modified) {
				continue
			}
			h, tr := framework.LeaseHolder(l)
			if h == holder && tr == token && l.Spec.RenewTime != nil {
				last = l.Spec.RenewTime.Time
				continue
			}
			if !last.IsZero() {
				return last // the first change by someone else: history up to the outage is complete
			}
		case <-ctx.Done():
			return checkLast(t, last)
		}
	}
}

func checkLast(t *testing.T, last time.Time) time.Time {
	t.Helper()
	if last.IsZero() {
		t.Fatal("the Lease's history shows no renewal by the leader")
	}
	return last
}
