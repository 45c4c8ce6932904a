package integration

import (
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// Issue 3 #8: a mixed group, two elector-sidecars and one client-go
// LeaderElector on the same Lease: never two holders, across kills.
func TestMixedGroupWithClientGo(t *testing.T) {
	g := newGroup(t, testTimings)
	g.start("ours-a", "ours-b")
	g.startClientGo("clientgo")
	bound := testTimings.LeaseDuration + failoverSlack

	// Watch the Lease's holder throughout: it only ever names a member.
	holders := map[string]int{}
	var hmu sync.Mutex
	wctx, stopWatch := context.WithCancel(g.ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for wctx.Err() == nil {
			if l, err := env.cp.Client.CoordinationV1().Leases(g.namespace).Get(wctx, g.lease, metav1.GetOptions{}); err == nil {
				h, _ := framework.LeaseHolder(l)
				hmu.Lock()
				holders[h]++
				hmu.Unlock()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	defer func() {
		stopWatch()
		wg.Wait()
		hmu.Lock()
		defer hmu.Unlock()
		for h := range holders {
			if h != "" && h != "ours-a" && h != "ours-b" && h != "clientgo" {
				t.Errorf("Lease named unknown holder %q", h)
			}
		}
		t.Logf("Lease holders seen (polls): %v", holders)
	}()

	led := map[framework.CandidateKind]int{}
	leader, tok := g.waitLeader(startupTimeout)
	led[leader.Spec.Kind]++
	t.Logf("first leader %s (%s) token %d", leader.Instance, leader.Spec.Kind, tok.Token)

	// Kill whoever leads, twice, restarting the victim as a follower.
	for round := 0; round < 2; round++ {
		time.Sleep(testTimings.RetryPeriod)
		killedAt := time.Now()
		_ = leader.Kill()
		_, _ = leader.Wait(5 * time.Second)
		next, ntok := g.waitLeader(bound, leader)
		t.Logf("round %d: killed %s (token %d) -> %s (%s) token %d after %v", round, leader.Instance, tok.Token, next.Instance, next.Spec.Kind, ntok.Token, time.Since(killedAt).Round(time.Millisecond))
		if ntok.Token <= tok.Token {
			t.Fatalf("token %d after the kill is not greater than %d", ntok.Token, tok.Token)
		}
		restart(t, g, leader)
		leader, tok = next, ntok
		led[leader.Spec.Kind]++
	}

	// Make the client-go candidate lead: kill both of ours.
	cg := g.Get("clientgo")
	if leader != cg {
		for _, id := range []string{"ours-a", "ours-b"} {
			_ = g.Get(id).Kill()
			_, _ = g.Get(id).Wait(5 * time.Second)
		}
		next, ntok := g.waitLeader(bound)
		if next != cg {
			t.Fatalf("leader %s, want the client-go candidate", next.Instance)
		}
		if ntok.Token <= tok.Token {
			t.Fatalf("client-go leads with leaseTransitions %d, not greater than %d", ntok.Token, tok.Token)
		}
		t.Logf("client-go candidate leads with leaseTransitions %d", ntok.Token)
		leader, tok = next, ntok
		led[framework.KindClientGo]++
		g.start("ours-a", "ours-b")
	}
	// Ours stay followers while client-go renews.
	time.Sleep(2 * testTimings.LeaseDuration)
	if ls := g.Leaders(g.ctx); len(ls) != 1 || ls[0] != cg {
		t.Fatalf("leaders %v while the client-go candidate renews\n%s", ls, g.Describe(g.ctx))
	}
	// Kill client-go: one of ours takes over with a greater token.
	killedAt := time.Now()
	_ = cg.Kill()
	_, _ = cg.Wait(5 * time.Second)
	next, ntok := g.waitLeader(bound, cg)
	t.Logf("killed client-go (token %d) -> %s token %d after %v", tok.Token, next.Instance, ntok.Token, time.Since(killedAt).Round(time.Millisecond))
	if next.Spec.Kind != framework.KindSidecar || ntok.Token <= tok.Token {
		t.Fatalf("after client-go: %s (%s) token %d, want an elector-sidecar with a token above %d", next.Instance, next.Spec.Kind, ntok.Token, tok.Token)
	}
	led[framework.KindSidecar]++

	// Graceful handoff from ours to client-go (SIGTERM releases the Lease).
	g.startClientGo("clientgo")
	time.Sleep(testTimings.RetryPeriod)
	for _, c := range g.Running() {
		if c.Spec.Kind == framework.KindSidecar {
			_ = c.Terminate()
		}
	}
	next2, ntok2 := g.waitLeader(bound, next)
	if next2.Spec.Kind != framework.KindClientGo || ntok2.Token <= ntok.Token {
		t.Fatalf("after SIGTERM of ours: %s token %d, want client-go with a token above %d", next2.Instance, ntok2.Token, ntok.Token)
	}
	t.Logf("SIGTERM of ours -> client-go leads with leaseTransitions %d; leaders by kind: %v", ntok2.Token, led)
}

func restart(t *testing.T, g *electionGroup, c *framework.Candidate) {
	t.Helper()
	if c.Spec.Kind == framework.KindClientGo {
		g.startClientGo(c.Identity())
	} else {
		g.start(c.Identity())
	}
}
