package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// A mixed group, two elector-sidecars and one client-go
// LeaderElector on the same Lease: never two holders, across kills.
func TestMixedGroupWithClientGo(t *testing.T) {
	g := newGroup(t, testTimings)
	g.start("ours-a", "ours-b")
	bound := testTimings.LeaseDuration + failoverSlack

	// Watch the Lease's holder throughout (an informer: every version it is
	// sent, relisting after errors): it only ever names a member.
	holders := map[string]int{}
	var hmu sync.Mutex
	record := func(obj any) {
		if l, ok := obj.(*coordinationv1.Lease); ok {
			h, _ := framework.LeaseHolder(l)
			hmu.Lock()
			holders[h]++
			hmu.Unlock()
		}
	}
	factory := informers.NewSharedInformerFactoryWithOptions(env.cp.Client, 0, informers.WithNamespace(g.namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + g.lease }))
	if _, err := factory.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, obj any) { record(obj) },
	}); err != nil {
		t.Fatal(err)
	}
	wctx, stopWatch := context.WithCancel(g.ctx)
	factory.Start(wctx.Done())
	defer func() {
		stopWatch()
		factory.Shutdown()
		hmu.Lock()
		defer hmu.Unlock()
		for h := range holders {
			if h != "" && h != "ours-a" && h != "ours-b" && h != "clientgo" {
				t.Errorf("Lease named unknown holder %q", h)
			}
		}
		t.Logf("Lease holders seen (Lease versions): %v", holders)
	}()

	led := map[framework.CandidateKind]int{}
	// Ours create a new Lease only after one lease duration (nobody may still
	// hold a deleted one); client-go creates at once and would always lead
	// first with leaseTransitions 0. Let ours create it, then add client-go.
	leader, tok := g.waitLeader(startupTimeout)
	g.startClientGo("clientgo")
	led[leader.Spec.Kind]++
	t.Logf("first leader %s (%s) token %d", leader.Instance, leader.Spec.Kind, tok.Token)

	// Kill whoever leads, twice, restarting the victim as a follower.
	for round := 0; round < 2; round++ {
		g.waitAllSee(leader, tok.Token)
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
	// Ours stay followers while client-go renews: throughout two lease
	// durations (the claim is about that period) only client-go leads.
	err := framework.Consistently(g.ctx, 200*time.Millisecond, 2*testTimings.LeaseDuration, "only the client-go candidate leads",
		func(ctx context.Context) error {
			if ls := g.Leaders(ctx); len(ls) != 1 || ls[0] != cg {
				return fmt.Errorf("leaders %v", ls)
			}
			return nil
		})
	if err != nil {
		t.Fatalf("%v\n%s", err, g.Describe(g.ctx))
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
	g.waitAllSee(next, ntok.Token) // the new client-go candidate has observed our leader
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
