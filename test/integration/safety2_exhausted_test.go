package integration

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
)

// Issue 23, N5: one write of leaseTransitions = 2147483647 (the largest
// count a Lease holds) leaves no token to issue. The sidecars say so
// instead of wedging silently: /leader cannotLead names the count on every
// candidate, elector_cannot_lead is 1, and a Warning Event is recorded on
// the Lease; nobody serves a token (in particular not the edited count).
// The recovery the README documents, one patch that lowers the count and
// sets a new elector-sidecar.io/transitions-reset value, brings a leader
// back with token 42 (after 41) without restarting any process.
func TestExhaustedLeaseTransitionsAreReportedAndAResetPatchRecovers(t *testing.T) {
	g := newGroup(t, testTimings)
	t.Cleanup(func() { g.checkClaims(nil) })
	procs := g.start("pod-a", "pod-b", "pod-c")
	leader, tok := g.waitLeader(startupTimeout)
	g.waitAllSee(leader, tok.Token)

	g.updateLeaseSpec(func(l *coordinationv1.Lease) {
		top := int32(math.MaxInt32)
		l.Spec.LeaseTransitions = &top
	})
	edited := time.Now()
	reasons := map[string]string{}
	g.waitFor(2*testTimings.LeaseDuration+failoverSlack, "every candidate's /leader to say it cannot lead, and no token served", func(ctx context.Context) error {
		for _, c := range procs {
			if r := c.Token(ctx); r.Valid() {
				return fmt.Errorf("%s serves %s", c.Instance, r)
			}
			d, err := diagnostics(ctx, c)
			if err != nil {
				return err
			}
			if !strings.Contains(d.CannotLead, "2147483647") {
				return fmt.Errorf("%s: /leader cannotLead %q, want the reason naming leaseTransitions 2147483647", c.Instance, d.CannotLead)
			}
			reasons[c.Instance] = d.CannotLead
		}
		return nil
	})
	t.Logf("leaseTransitions set to 2147483647 by hand; %v later every candidate says it cannot lead, e.g. %s: %q",
		time.Since(edited).Round(time.Millisecond), procs[0].Instance, reasons[procs[0].Instance])
	event := g.waitWarning(10*time.Second, "2147483647")
	g.waitMetric("elector_cannot_lead", 1)
	t.Logf("Warning Event: %s", event)
	for _, s := range g.Sampler.Samples() {
		if s.Valid() && s.Token >= math.MaxInt32 {
			t.Fatalf("%s served token %d, a count nobody acquired", s.Target, s.Token)
		}
	}

	// The README's recovery: one patch lowers the count and declares it.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"1"}},"spec":{"leaseTransitions":41}}`, election.TransitionsResetAnnotation)
	if out, err := env.cp.Kubectl(g.ctx, "-n", g.namespace, "patch", "lease", g.lease, "--type=merge", "-p", patch); err != nil {
		t.Fatalf("kubectl patch lease: %v\n%s", err, out)
	}
	patched := time.Now()
	next, ntok := g.waitLeader(2*testTimings.LeaseDuration + failoverSlack)
	if ntok.Token != 42 {
		t.Fatalf("%s leads with token %d after the count was reset to 41, want 42", next.Instance, ntok.Token)
	}
	g.waitAllSee(next, 42)
	g.waitFor(10*time.Second, "no candidate saying it cannot lead", func(ctx context.Context) error {
		for _, c := range procs {
			d, err := diagnostics(ctx, c)
			if err != nil {
				return err
			}
			if d.CannotLead != "" {
				return fmt.Errorf("%s: /leader cannotLead %q", c.Instance, d.CannotLead)
			}
		}
		return nil
	})
	g.waitMetric("elector_cannot_lead", 0)
	if all := g.All(); len(all) != len(procs) {
		t.Fatalf("%d processes started, want the %d first ones only", len(all), len(procs))
	}
	for _, c := range procs {
		if c.Exited() {
			t.Fatalf("%s exited", c.Instance)
		}
	}
	t.Logf("reset patch: %s leads with token 42 %v later, no process restarted", next.Instance, time.Since(patched).Round(time.Millisecond))
}

// waitMetric waits until name reads want on every running candidate.
func (g *electionGroup) waitMetric(name string, want float64) {
	g.t.Helper()
	g.waitFor(10*time.Second, fmt.Sprintf("%s %v on every candidate", name, want), func(ctx context.Context) error {
		for _, c := range g.Running() {
			v, err := metricValue(ctx, c, name)
			if err != nil {
				return err
			}
			if v != want {
				return fmt.Errorf("%s: %s %v", c.Instance, name, v)
			}
		}
		return nil
	})
}
