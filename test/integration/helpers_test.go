package integration

import (
	"context"
	"errors"
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
			t.Logf("invariants held over %d /token samples (%d terms):\n%s%s", len(g.Sampler.Samples()), len(g.Sampler.Terms()),
				framework.FormatTerms(g.Sampler.Terms(), g.Sampler.Start), formatPossible(g.Sampler.PossibleOverlaps()))
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

// waitFor waits (framework.Eventually) until cond returns nil and fails the
// test with cond's last error and the group's state if it does not within timeout.
func (g *electionGroup) waitFor(timeout time.Duration, what string, cond func(ctx context.Context) error) {
	g.t.Helper()
	if err := framework.Eventually(g.ctx, framework.PollInterval, timeout, what, cond); err != nil {
		g.t.Fatalf("%v\n%s", err, g.Describe(g.ctx))
	}
}

// firstTakeover returns the first valid /token sample sent at or after t by
// any process other than old (waiting for it: the sampler may lag behind the
// call that found the new leader).
func (g *electionGroup) firstTakeover(t time.Time, old *framework.Candidate) framework.Sample {
	g.t.Helper()
	var s framework.Sample
	g.waitFor(3*time.Second, "the sampler to see a token from a process other than "+old.Instance+" after "+g.Sampler.Rel(t), func(context.Context) error {
		var ok bool
		if s, ok = g.Sampler.FirstValidAfter(t, old.Instance); !ok {
			return errors.New("none yet")
		}
		return nil
	})
	return s
}

// allSee checks that every running candidate has observed leader's term:
// its /leader names leader as holder (isLeader only on leader itself) and,
// for elector-sidecars, shows token as the Lease's leaseTransitions. (The
// client-go candidate's /leader reads leaseTransitions fresh from the
// apiserver, so only its holder says what it observed.)
func (g *electionGroup) allSee(ctx context.Context, leader *framework.Candidate, token int64) error {
	for _, c := range g.Running() {
		st, err := c.Leader(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", c.Instance, err)
		}
		if st.Holder != leader.Identity() || st.IsLeader != (c == leader) {
			return fmt.Errorf("%s: /leader holder=%q isLeader=%v, want holder %s", c.Instance, st.Holder, st.IsLeader, leader.Identity())
		}
		if c.Spec.Kind == framework.KindSidecar && st.LeaseTransitions != token {
			return fmt.Errorf("%s: /leader leaseTransitions=%d, want %d", c.Instance, st.LeaseTransitions, token)
		}
	}
	return nil
}

// waitAllSee waits until every running candidate has observed leader's term
// with token (allSee): followers whose expiry timers and highest-seen token
// now reflect it.
func (g *electionGroup) waitAllSee(leader *framework.Candidate, token int64) {
	g.t.Helper()
	g.waitFor(10*time.Second, fmt.Sprintf("every candidate's /leader to name %s with leaseTransitions %d", leader.Instance, token),
		func(ctx context.Context) error { return g.allSee(ctx, leader, token) })
}

// waitRenewed waits until the Lease shows leader's term with token and at
// least one renewal after the acquisition (renewTime after acquireTime).
func (g *electionGroup) waitRenewed(leader *framework.Candidate, token int64) {
	g.t.Helper()
	g.waitFor(10*time.Second, fmt.Sprintf("a renewal of the Lease by %s with leaseTransitions %d", leader.Instance, token), func(ctx context.Context) error {
		l, err := env.cp.GetLease(ctx, g.namespace, g.lease)
		if err != nil {
			return err
		}
		holder, transitions := framework.LeaseHolder(l)
		if holder != leader.Identity() || transitions != token || l.Spec.RenewTime == nil || l.Spec.AcquireTime == nil ||
			!l.Spec.RenewTime.After(l.Spec.AcquireTime.Time) {
			return fmt.Errorf("Lease spec %+v", l.Spec)
		}
		return nil
	})
}

// waitSampledSince waits until the sampler has a /token answer of every
// running candidate sent at or after since.
func (g *electionGroup) waitSampledSince(since time.Time) {
	g.t.Helper()
	g.waitFor(10*time.Second, "a /token sample of every running candidate after "+g.Sampler.Rel(since), func(context.Context) error {
		for _, c := range g.Running() {
			ss := g.Sampler.SamplesOf(c.Instance)
			if len(ss) == 0 || ss[len(ss)-1].Sent.Before(since) {
				return fmt.Errorf("no sample of %s yet", c.Instance)
			}
		}
		return nil
	})
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
func (g *electionGroup) exactlyOneLeader(ctx context.Context) error {
	leaders := g.Leaders(ctx)
	if len(leaders) != 1 {
		return fmt.Errorf("%d candidates serve a token: %v", len(leaders), leaders)
	}
	leader := leaders[0]
	for _, c := range g.Running() {
		st, err := c.Leader(ctx)
		if err != nil {
			return err
		}
		if c == leader != st.IsLeader || st.Holder != leader.Identity() {
			return fmt.Errorf("%s: /leader isLeader=%v holder=%q, leader is %s", c.Instance, st.IsLeader, st.Holder, leader.Instance)
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

// formatPossible lists the pairs of terms the sampler could neither prove
// nor rule out as overlapping (the calls' delays hide their order), if any.
func formatPossible(vs []framework.Violation) string {
	if len(vs) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d possible overlap(s), not violations (the calls' delays hide the order):\n", len(vs))
	for _, v := range vs {
		fmt.Fprintf(&b, "  %s\n", v.Detail)
	}
	return b.String()
}
