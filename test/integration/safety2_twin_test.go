package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// Issue 23, N4: two processes with one identity (a misconfiguration), and
// one other candidate. Each process writes its own incarnation with each
// acquire, and a term is only its own process's to renew or release. The
// second process reports the collision (/leader identityCollision, a
// Warning Event on the Lease, elector_identity_collisions_total); a
// SIGTERMed twin leaves the other's term alone (it is renewed by its own
// process after the twin exited); when the real holder is SIGTERMed, the
// next leader (the other twin or the other identity) waits out its claims.
// Over the whole test no two processes serve valid tokens at once (the
// group's overlap check and framework.CheckClaims), and the stored Lease's
// incarnation annotation changes only with an acquisition (a higher count).
func TestTwinIdentityIsReportedAndNeverTakesTheOtherTwinsTerm(t *testing.T) {
	g := newGroup(t, testTimings)
	t.Cleanup(func() { g.checkClaims(nil) })
	first := g.start("pod-a")[0]
	leader, tok := g.waitLeader(startupTimeout)
	if leader != first {
		t.Fatalf("%s leads, want the only candidate %s", leader.Instance, first.Instance)
	}
	g.start("pod-b")
	g.waitAllSee(first, tok.Token)
	g.waitRenewed(first, tok.Token)
	history := g.recordLease()
	l, err := env.cp.GetLease(g.ctx, g.namespace, g.lease)
	if err != nil {
		t.Fatal(err)
	}
	firstInc := l.Annotations[election.IncarnationAnnotation]
	if firstInc == "" {
		t.Fatalf("the Lease acquired by %s has no %s annotation: %v", first.Instance, election.IncarnationAnnotation, l.Annotations)
	}

	// 1. A twin starts: it sees the Lease renewed under its identity by
	// another process and says so; the term stays the first process's.
	twin := g.start("pod-a")[0]
	collision := g.waitCollision(twin)
	event := g.waitWarning(10*time.Second, "pod-a", "identity")
	g.waitFor(5*time.Second, "elector_identity_collisions_total >= 1 on "+twin.Instance, func(ctx context.Context) error {
		v, err := metricValue(ctx, twin, "elector_identity_collisions_total")
		if err == nil && v < 1 {
			err = fmt.Errorf("elector_identity_collisions_total %v", v)
		}
		return err
	})
	if r := twin.Token(g.ctx); r.Valid() {
		t.Fatalf("the twin %s serves %s while %s holds the term", twin.Instance, r, first.Instance)
	}
	t.Logf("%s (a second process named pod-a) reports: %s; Event: %s", twin.Instance, collision, event)

	// 2. The twin is SIGTERMed: its shutdown releases nothing of the other's
	// term, which its own process keeps renewing.
	if err := twin.Terminate(); err != nil {
		t.Fatal(err)
	}
	if _, err := twin.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	exited := time.Now()
	g.waitFor(10*time.Second, fmt.Sprintf("a renewal by %s of its term (token %d) after the twin exited", first.Instance, tok.Token), func(ctx context.Context) error {
		l, err := env.cp.GetLease(ctx, g.namespace, g.lease)
		if err != nil {
			return err
		}
		if holder, transitions := framework.LeaseHolder(l); holder != "pod-a" || transitions != tok.Token || l.Annotations[election.IncarnationAnnotation] != firstInc {
			return fmt.Errorf("the Lease is holder %q, leaseTransitions %d, incarnation %q (want pod-a, %d, %s)", holder, transitions, l.Annotations[election.IncarnationAnnotation], tok.Token, firstInc)
		}
		if l.Spec.RenewTime == nil || !l.Spec.RenewTime.After(exited) {
			return errors.New("not renewed since")
		}
		return nil
	})
	if r := first.Token(g.ctx); !r.Valid() || r.Token != tok.Token {
		t.Fatalf("%s after its twin's SIGTERM: /token %s, want token %d", first.Instance, r, tok.Token)
	}

	// 3. Another twin starts; then the real holder is SIGTERMed: whoever
	// leads next (the twin or pod-b) does so with a higher token, after the
	// holder's claims.
	twin2 := g.start("pod-a")[0]
	g.waitCollision(twin2)
	g.answerSince(first, time.Now())
	trigger := time.Now()
	if err := first.Terminate(); err != nil {
		t.Fatal(err)
	}
	next, ntok := g.waitLeader(testTimings.LeaseDuration+failoverSlack, first)
	if ntok.Token <= tok.Token {
		t.Fatalf("%s leads with token %d after %d", next.Instance, ntok.Token, tok.Token)
	}
	summary, _ := g.claimsSummary(first, trigger, nil)
	t.Logf("SIGTERM %s (token %d) with its twin %s running -> %s token %d: %s", first.Instance, tok.Token, twin2.Instance, next.Instance, ntok.Token, summary)
	g.waitAllSee(next, ntok.Token)
	g.waitRenewed(next, ntok.Token)

	versions, err := history.Versions()
	if err != nil {
		t.Fatalf("watching the Lease: %v", err)
	}
	acquisitions, problems := incarnationChanges(versions)
	if len(problems) > 0 {
		t.Fatalf("the Lease's %s annotation changed without an acquisition:\n  %s", election.IncarnationAnnotation, strings.Join(problems, "\n  "))
	}
	if acquisitions < 1 {
		t.Fatalf("%d Lease versions recorded and no acquisition among them: the record missed the handoff", len(versions))
	}
	t.Logf("%d Lease versions recorded: the incarnation changed %d time(s), each with an acquisition", len(versions), acquisitions)
}

// waitCollision waits until c's /leader reports an identity collision, and
// returns it; c must not lead meanwhile.
func (g *electionGroup) waitCollision(c *framework.Candidate) string {
	g.t.Helper()
	var collision string
	g.waitFor(10*time.Second, c.Instance+"'s /leader to report an identityCollision", func(ctx context.Context) error {
		d, err := diagnostics(ctx, c)
		if err != nil {
			return err
		}
		if d.IsLeader {
			g.t.Errorf("%s, a second process with a leader's identity, leads: %+v", c.Instance, d)
		}
		if d.IdentityCollision == "" {
			return fmt.Errorf("/leader %+v", d)
		}
		collision = d.IdentityCollision
		return nil
	})
	return collision
}

// incarnationChanges walks the recorded Lease versions: among the versions
// with a holder on one Lease UID, the incarnation annotation may change only
// together with a higher leaseTransitions (an acquisition by another
// process). It returns the number of such changes and every other change.
func incarnationChanges(versions []*coordinationv1.Lease) (int, []string) {
	var prev *coordinationv1.Lease
	changes := 0
	var problems []string
	inc := func(l *coordinationv1.Lease) string { return l.Annotations[election.IncarnationAnnotation] }
	for _, l := range versions {
		if framework.HolderOf(l) == "" {
			continue
		}
		if prev != nil && prev.UID == l.UID && inc(l) != inc(prev) {
			if framework.TransitionsOf(l) <= framework.TransitionsOf(prev) {
				problems = append(problems, fmt.Sprintf("version %s: holder %q, leaseTransitions %d, incarnation %q after version %s: holder %q, leaseTransitions %d, incarnation %q",
					l.ResourceVersion, framework.HolderOf(l), framework.TransitionsOf(l), inc(l),
					prev.ResourceVersion, framework.HolderOf(prev), framework.TransitionsOf(prev), inc(prev)))
			} else {
				changes++
			}
		}
		prev = l
	}
	return changes, problems
}
