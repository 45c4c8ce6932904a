package integration

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// Exactly one leader among 3 candidates, stable over two lease durations; the
// Lease and kubectl show it.
func TestOneLeaderAmongThree(t *testing.T) {
	g := newGroup(t, testTimings)
	g.start("pod-a", "pod-b", "pod-c")
	leader, tok := g.waitLeader(startupTimeout)
	t.Logf("leader %s with token %d", leader.Instance, tok.Token)

	g.waitFor(5*time.Second, "exactly one leader, named by all", g.exactlyOneLeader)

	holder, transitions := g.leaseState()
	if holder != leader.Identity() {
		t.Fatalf("Lease holderIdentity %q, leader is %s", holder, leader.Identity())
	}
	if transitions != tok.Token {
		t.Fatalf("Lease leaseTransitions %d, token %d: the token must be the acquiring update's leaseTransitions", transitions, tok.Token)
	}
	out, err := env.cp.Kubectl(g.ctx, "get", "lease", "-n", g.namespace, g.lease, "-o", "wide")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl get lease -o wide:\n%s", out)
	if !strings.Contains(out, leader.Identity()) {
		t.Fatalf("kubectl get lease does not show holder %s:\n%s", leader.Identity(), out)
	}
	out, err = env.cp.Kubectl(g.ctx, "get", "lease", "-n", g.namespace, g.lease, "-o", "jsonpath={.spec.holderIdentity}")
	if err != nil || strings.TrimSpace(out) != leader.Identity() {
		t.Fatalf("kubectl holderIdentity %q (%v), want %s", out, err, leader.Identity())
	}

	// Stable: throughout two lease durations (the claim is about that period)
	// the same leader, with the same token, named by every candidate.
	err = framework.Consistently(g.ctx, 200*time.Millisecond, 2*testTimings.LeaseDuration, "one stable leader "+leader.Instance,
		func(ctx context.Context) error {
			if err := g.exactlyOneLeader(ctx); err != nil {
				return err
			}
			return g.allSee(ctx, leader, tok.Token)
		})
	if err != nil {
		t.Fatalf("%v\n%s", err, g.Describe(g.ctx))
	}
	for _, term := range g.Sampler.Terms() {
		if term.Target != leader.Instance || term.Token != tok.Token {
			t.Fatalf("unexpected term %+v while %s led with token %d", term, leader.Instance, tok.Token)
		}
	}
	// The text form of /token is the bare number.
	code, body, err := leader.API.TokenText(g.ctx)
	if err != nil || code != 200 || strings.TrimSpace(body) != strconv.FormatInt(tok.Token, 10) {
		t.Fatalf("GET /token Accept: text/plain = %d %q %v, want 200 %d", code, body, err, tok.Token)
	}
}

// SIGKILL the leader: a new leader within leaseDuration + a bound, token strictly greater.
func TestFailoverAfterSIGKILL(t *testing.T) {
	g := newGroup(t, testTimings)
	g.start("pod-a", "pod-b", "pod-c")
	old, tok := g.waitLeader(startupTimeout)
	g.waitAllSee(old, tok.Token)

	killedAt := time.Now()
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	bound := testTimings.LeaseDuration + failoverSlack
	next, ntok := g.waitLeader(bound, old)
	took := g.firstTakeover(killedAt, old)
	failover := took.Received.Sub(killedAt)
	t.Logf("SIGKILL %s (token %d) -> %s leads with token %d after %v (leaseDuration %v, bound %v)",
		old.Instance, tok.Token, next.Instance, ntok.Token, failover.Round(time.Millisecond), testTimings.LeaseDuration, bound)
	if failover > bound {
		t.Fatalf("failover took %v, bound %v", failover, bound)
	}
	if ntok.Token <= tok.Token {
		t.Fatalf("new token %d is not greater than the old %d", ntok.Token, tok.Token)
	}
	if code, _ := old.Wait(5 * time.Second); code != -1 {
		t.Fatalf("killed process exit code %d, want -1 (signal)", code)
	}
	g.waitFor(5*time.Second, "exactly one leader after failover", g.exactlyOneLeader)
}

// handoffTimings have a long retry period, so a handoff that is well under
// it proves followers react to the release instead of polling.
var handoffTimings = framework.Timings{
	LeaseDuration:   15 * time.Second,
	RenewDeadline:   10 * time.Second,
	RetryPeriod:     5 * time.Second,
	ClockSkewMargin: 500 * time.Millisecond,
}

// handoffBound is "well under the retry period" with room for a loaded machine.
const handoffBound = 2500 * time.Millisecond

// SIGTERM the leader: handoff well under the retry period; token strictly
// greater; the old process exits 0. With --shutdown-handoff=immediate, as
// the chart runs a native sidecar (the app has exited before the sidecar's
// SIGTERM); the default's wait is TestHandoffNeverBreaksTheValidityHandedOut's.
func TestHandoffOnSIGTERM(t *testing.T) {
	g := newGroup(t, handoffTimings)
	g.Template.ExtraArgs = append(g.Template.ExtraArgs, "--shutdown-handoff=immediate")
	g.start("pod-a", "pod-b", "pod-c")
	var handoffs []time.Duration
	for round := 0; round < 2; round++ {
		old, tok := g.waitLeader(startupTimeout)
		// the followers have seen the leader's Lease (their informers are synced)
		g.waitAllSee(old, tok.Token)
		termAt := time.Now()
		if err := old.Terminate(); err != nil {
			t.Fatal(err)
		}
		next, ntok := g.waitLeader(handoffBound+5*time.Second, old)
		took := g.firstTakeover(termAt, old)
		handoff := took.Received.Sub(termAt)
		code, err := old.Wait(5 * time.Second)
		if err != nil {
			t.Fatalf("old leader did not exit after SIGTERM: %v", err)
		}
		exitAfter := old.ExitedAt().Sub(termAt)
		t.Logf("round %d: SIGTERM %s (token %d) -> %s leads with token %d after %v; old process exited %d after %v (retryPeriod %v)",
			round, old.Instance, tok.Token, next.Instance, ntok.Token, handoff.Round(time.Millisecond), code, exitAfter.Round(time.Millisecond), handoffTimings.RetryPeriod)
		if code != 0 {
			t.Fatalf("old leader exited %d after SIGTERM, want 0", code)
		}
		if exitAfter > 2*time.Second+time.Second {
			t.Errorf("old leader took %v to exit after SIGTERM (contract: within 2s)", exitAfter)
		}
		if handoff > handoffBound {
			t.Fatalf("handoff took %v, want under %v (retry period %v)", handoff, handoffBound, handoffTimings.RetryPeriod)
		}
		if ntok.Token <= tok.Token {
			t.Fatalf("new token %d is not greater than the old %d", ntok.Token, tok.Token)
		}
		handoffs = append(handoffs, handoff)
		// bring the identity back as a follower for the next round
		g.start(old.Identity())
	}
	t.Logf("handoffs: %v", handoffs)
}

// The same pod name restarting while it still holds the Lease: the new
// process's token is greater.
func TestSamePodNameRestart(t *testing.T) {
	t.Run("alone", func(t *testing.T) {
		g := newGroup(t, testTimings)
		g.start("solo")
		old, tok := g.waitLeader(startupTimeout)
		g.waitRenewed(old, tok.Token)
		_ = old.Kill()
		_, _ = old.Wait(5 * time.Second)
		restartedAt := time.Now()
		fresh := g.start("solo")[0]
		next, ntok := g.waitLeader(testTimings.LeaseDuration+failoverSlack, old)
		if next != fresh {
			t.Fatalf("leader %s, want the restarted %s", next.Instance, fresh.Instance)
		}
		holder, _ := g.leaseState()
		t.Logf("%s (token %d) killed, %s leads with token %d after %v (Lease holder %q)",
			old.Instance, tok.Token, fresh.Instance, ntok.Token, time.Since(restartedAt).Round(time.Millisecond), holder)
		if ntok.Token <= tok.Token {
			t.Fatalf("restarted process token %d is not greater than its predecessor's %d", ntok.Token, tok.Token)
		}
	})
	t.Run("with-followers", func(t *testing.T) {
		g := newGroup(t, testTimings)
		g.start("pod-a", "pod-b", "pod-c")
		old, tok := g.waitLeader(startupTimeout)
		g.waitAllSee(old, tok.Token)
		_ = old.Kill()
		_, _ = old.Wait(5 * time.Second)
		fresh := g.start(old.Identity())[0]
		next, ntok := g.waitLeader(testTimings.LeaseDuration+failoverSlack, old)
		t.Logf("%s (token %d) killed and restarted as %s; %s leads with token %d", old.Instance, tok.Token, fresh.Instance, next.Instance, ntok.Token)
		if ntok.Token <= tok.Token {
			t.Fatalf("token %d after the restart is not greater than %d", ntok.Token, tok.Token)
		}
		// Whoever leads, the restarted process must never serve its predecessor's token
		// (the sampler's token-order check covers it); make it lead to see its token.
		for next != fresh {
			_ = next.Terminate()
			_, _ = next.Wait(5 * time.Second)
			g.start(next.Identity())
			prev := ntok.Token
			next, ntok = g.waitLeader(testTimings.LeaseDuration+failoverSlack, next)
			if ntok.Token <= prev {
				t.Fatalf("token %d after handoff is not greater than %d", ntok.Token, prev)
			}
		}
		if ntok.Token <= tok.Token {
			t.Fatalf("restarted %s leads with token %d, not greater than its predecessor's %d", fresh.Instance, ntok.Token, tok.Token)
		}
	})
}
