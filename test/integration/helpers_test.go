package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// testTimings are the short election timings of most tests.
var testTimings = framework.TestTimings

// Generous bounds (a loaded 2-core machine); the benchmark measures the tight numbers.
const (
	// failoverSlack is added to leaseDuration for a takeover after a crash or pause.
	failoverSlack = 5 * time.Second
	// startupTimeout bounds the first election in a fresh namespace.
	startupTimeout = 20 * time.Second
)

// electionGroup is a group of candidates on a fresh namespace and Lease, with
// the overlap sampler running. Its cleanup stops the sampler, checks the
// invariants, stops every process and, on failure, prints their logs.
type electionGroup struct {
	*framework.Group
	t         *testing.T
	ctx       context.Context
	namespace string
	lease     string
}

func newGroup(t *testing.T, timings framework.Timings) *electionGroup {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	ns, err := env.cp.CreateNamespace(ctx, "it")
	if err != nil {
		t.Fatal(err)
	}
	g := &electionGroup{
		Group: framework.NewGroup(framework.CandidateSpec{
			Kind:       framework.KindSidecar,
			Binary:     env.sidecarBin,
			LeaseName:  "leader",
			Namespace:  ns,
			Kubeconfig: env.cp.Kubeconfig,
			Timings:    timings,
			LogDir:     filepath.Join(env.logDir, t.Name()),
		}),
		t: t, ctx: ctx, namespace: ns, lease: "leader",
	}
	t.Cleanup(func() {
		g.Sampler.Stop()
		if err := g.Sampler.Check(); err != nil {
			t.Errorf("sampled /token of %d processes: %v", len(g.All()), err)
		} else {
			t.Logf("invariants held over %d /token samples (%d terms):\n%s", len(g.Sampler.Samples()), len(g.Sampler.Terms()),
				framework.FormatTerms(g.Sampler.Terms(), g.Sampler.Start))
		}
		g.StopAll(3 * time.Second)
		if t.Failed() {
			t.Logf("process logs (last lines):\n%s", g.Logs(60))
		}
	})
	return g
}

// start starts sidecars with the given identities.
func (g *electionGroup) start(identities ...string) []*framework.Candidate {
	g.t.Helper()
	cs, err := g.StartAll(g.ctx, identities...)
	if err != nil {
		g.t.Fatal(err)
	}
	return cs
}

// startClientGo starts a client-go baseline candidate on the same Lease.
func (g *electionGroup) startClientGo(identity string) *framework.Candidate {
	g.t.Helper()
	spec := g.Template
	spec.Kind = framework.KindClientGo
	spec.Binary = env.candidateBin
	spec.Identity = identity
	c, err := g.StartSpec(g.ctx, spec)
	if err != nil {
		g.t.Fatal(err)
	}
	return c
}

// waitLeader waits for a candidate other than exclude to serve a token.
func (g *electionGroup) waitLeader(timeout time.Duration, exclude ...*framework.Candidate) (*framework.Candidate, framework.TokenResult) {
	g.t.Helper()
	c, r, err := g.WaitForLeader(g.ctx, timeout, exclude...)
	if err != nil {
		g.t.Fatal(err)
	}
	return c, r
}

// leaseState returns the Lease's holder and leaseTransitions.
func (g *electionGroup) leaseState() (string, int64) {
	g.t.Helper()
	l, err := env.cp.GetLease(g.ctx, g.namespace, g.lease)
	if err != nil {
		g.t.Fatal(err)
	}
	return framework.LeaseHolder(l)
}

// eventually polls cond every 50ms until it returns nil or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true within %v: %v", what, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// firstTakeover returns the first valid /token sample sent at or after t by
// any process other than old (waiting briefly: the sampler may lag behind the
// call that found the new leader).
func (g *electionGroup) firstTakeover(t time.Time, old *framework.Candidate) framework.Sample {
	g.t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		if s, ok := g.Sampler.FirstValidAfter(t, old.Instance); ok {
			return s
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("the sampler saw no token from any process but %s after %s", old.Instance, g.Sampler.Rel(t))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// maxToken returns the highest token any process served so far.
func (g *electionGroup) maxToken() int64 {
	var m int64
	for _, s := range g.Sampler.Samples() {
		if s.Valid() && s.Token > m {
			m = s.Token
		}
	}
	return m
}

// exactlyOneLeader checks that exactly one running candidate serves a token
// and all others name it as holder in /leader.
func (g *electionGroup) exactlyOneLeader() error {
	leaders := g.Leaders(g.ctx)
	if len(leaders) != 1 {
		return fmt.Errorf("%d candidates serve a token: %v\n%s", len(leaders), leaders, g.Describe(g.ctx))
	}
	leader := leaders[0]
	for _, c := range g.Running() {
		st, err := c.Leader(g.ctx)
		if err != nil {
			return err
		}
		if c == leader != st.IsLeader || st.Holder != leader.Identity() {
			return fmt.Errorf("%s: /leader isLeader=%v holder=%q, leader is %s\n%s", c.Instance, st.IsLeader, st.Holder, leader.Instance, g.Describe(g.ctx))
		}
	}
	return nil
}

// updateLease applies mutate to the Lease, retrying on conflicts with the leader's renewals.
func (g *electionGroup) updateLease(mutate func(holder *string, transitions *int32)) {
	g.t.Helper()
	leases := env.cp.Client.CoordinationV1().Leases(g.namespace)
	for attempt := 0; ; attempt++ {
		l, err := leases.Get(g.ctx, g.lease, metav1.GetOptions{})
		if err != nil {
			g.t.Fatal(err)
		}
		var holder string
		var transitions int32
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		if l.Spec.LeaseTransitions != nil {
			transitions = *l.Spec.LeaseTransitions
		}
		mutate(&holder, &transitions)
		now := metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity = &holder
		l.Spec.LeaseTransitions = &transitions
		l.Spec.RenewTime = &now
		l.Spec.AcquireTime = &now
		_, err = leases.Update(g.ctx, l, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if attempt > 20 || !strings.Contains(err.Error(), "modified") {
			g.t.Fatalf("update lease: %v", err)
		}
	}
}
