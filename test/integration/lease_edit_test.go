package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// The Lease deleted, then hand-edited (holderIdentity changed,
// leaseTransitions lowered): tokens issued afterwards are still greater than
// every earlier token.
func TestLeaseDeletedAndHandEdited(t *testing.T) {
	g := newGroup(t, testTimings)
	g.start("pod-a", "pod-b", "pod-c")
	first, firstTok := g.waitLeader(startupTimeout)
	g.waitAllSee(first, firstTok.Token)

	// waitHigher waits for any process to serve a token above every token
	// served so far and returns it. The sampler may not have recorded the
	// latest token yet (its answers land when they are received): the
	// tokens this test saw count too.
	highest := firstTok.Token
	waitHigher := func(what string, since time.Time) (*framework.Candidate, int64) {
		t.Helper()
		floor := max(g.maxToken(), highest)
		var leader *framework.Candidate
		var tok int64
		g.waitFor(testTimings.LeaseDuration+failoverSlack, what+": a token above "+fmt.Sprint(floor), func(ctx context.Context) error {
			for _, c := range g.Running() {
				if r := c.Token(ctx); r.Valid() && r.Token > floor {
					leader, tok = c, r.Token
					return nil
				}
			}
			return errors.New("none yet")
		})
		t.Logf("%s: %s serves token %d (highest before: %d) %v later", what, leader.Instance, tok, floor, time.Since(since).Round(time.Millisecond))
		highest = tok
		return leader, tok
	}

	// 1. Delete the Lease.
	deletedAt := time.Now()
	if err := env.cp.Client.CoordinationV1().Leases(g.namespace).Delete(g.ctx, g.lease, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	g.waitAllSee(waitHigher("after delete", deletedAt))

	// 2. Hand-edit: an unknown holder and leaseTransitions lowered to 0.
	editedAt := time.Now()
	g.updateLease(func(holder *string, transitions *int32) {
		*holder = "hand-edited"
		*transitions = 0
	})
	leader, tok := waitHigher("after holder=hand-edited, leaseTransitions=0", editedAt)
	if holder, _ := g.leaseState(); holder != leader.Identity() {
		t.Fatalf("Lease holder %q, leader %s", holder, leader.Identity())
	}
	g.waitAllSee(leader, tok)

	// 3. Hand-edit: a follower named as holder, leaseTransitions lowered to 1.
	// The follower never acquired it, so it must not serve leaseTransitions 1
	// as a token (the sampler's token-order check), and whoever leads next
	// must have a token above every earlier one.
	var follower *framework.Candidate
	for _, c := range g.Running() {
		if c != leader {
			follower = c
			break
		}
	}
	editedAt = time.Now()
	g.updateLease(func(holder *string, transitions *int32) {
		*holder = follower.Identity()
		*transitions = 1
	})
	waitHigher("after holder="+follower.Identity()+", leaseTransitions=1", editedAt)
	g.waitFor(5*time.Second, "exactly one leader", g.exactlyOneLeader)
	if _, transitions := g.leaseState(); transitions <= 1 {
		t.Fatalf("Lease leaseTransitions %d after the edits", transitions)
	}
}

// Found by the chaos soak: the leader crashes, the Lease is deleted, and a candidate that never saw it starts right then. The contract
// says the token never goes backwards while any candidate that saw the Lease
// keeps running; here two do, so whoever leads next must still have a token
// above every earlier one (the newcomer must not recreate the Lease from 1).
func TestLeaseDeletedThenNewCandidate(t *testing.T) {
	g := newGroup(t, testTimings)
	g.start("pod-a", "pod-b", "pod-c")
	leader, tok := g.waitLeader(startupTimeout)
	// Two handoffs, so the token is well above 1.
	for i := 0; i < 2; i++ {
		_ = leader.Terminate()
		_, _ = leader.Wait(5 * time.Second)
		g.start(leader.Identity())
		leader, tok = g.waitLeader(testTimings.LeaseDuration+failoverSlack, leader)
	}
	// The two survivors have seen the latest Lease: they remember its token.
	g.waitAllSee(leader, tok.Token)
	floor := g.maxToken()

	_ = leader.Kill()
	_, _ = leader.Wait(5 * time.Second)
	deletedAt := time.Now()
	if err := env.cp.Client.CoordinationV1().Leases(g.namespace).Delete(g.ctx, g.lease, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	newcomer := g.start("newcomer")[0]
	next, ntok := g.waitLeader(testTimings.LeaseDuration+failoverSlack, leader)
	t.Logf("leader %s killed, Lease deleted (highest token served before: %d), %s started; %s leads with token %d after %v",
		leader.Instance, floor, newcomer.Instance, next.Instance, ntok.Token, time.Since(deletedAt).Round(time.Millisecond))
	// Every process that might have served a token has settled on the new
	// term, and the sampler has asked each of them since.
	g.waitAllSee(next, ntok.Token)
	g.waitSampledSince(time.Now())
	for _, s := range g.Sampler.Samples() {
		if s.Valid() && !s.Sent.Before(deletedAt) && s.Token <= floor {
			t.Fatalf("%s served token %d after the Lease was deleted, not above the %d served before (two candidates that saw the Lease were running)",
				s.Target, s.Token, floor)
		}
	}
}
