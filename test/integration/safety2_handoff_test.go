package integration

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// Issue 23, N6: a handoff never breaks a claim the app holds. Twelve
// handoffs, alternately by SIGTERM (the default --shutdown-handoff,
// after-validity) and by POST /release, with the sampler asking every
// process for /token all along. Each answer's expiresInMs is a claim: the
// answer sent at S with expiresInMs E promises the token until S+E, and no
// other process may serve a higher token to a request sent before S+E
// (framework.CheckClaims), except that a POST /release by the claiming
// process gives its token back at the moment it was sent.
//
// Each handoff starts while the app holds a fresh answer (the sampler's,
// sent after the round began), so every SIGTERM round has a claim that
// reaches past the signal: the check cannot pass for want of one. The
// release a SIGTERM writes tells followers to wait (its record's waitMs >
// 0); the one POST /release writes does not (waitMs 0).
func TestHandoffNeverBreaksTheValidityHandedOut(t *testing.T) {
	const rounds = 12
	g := newGroup(t, testTimings)
	var releases []framework.ReleaseCall
	checked := false
	t.Cleanup(func() {
		if !checked { // the test ended before its own check
			g.checkClaims(releases)
		}
	})
	g.start("pod-a", "pod-b", "pod-c")
	leader, tok := g.waitLeader(startupTimeout)
	start := time.Now()

	for round := 1; round <= rounds; round++ {
		bySIGTERM := round%2 == 1
		roundStart := time.Now()
		g.answerSince(leader, roundStart)
		w, _ := g.watchLease()
		var trigger time.Time
		how := "POST /release"
		if bySIGTERM {
			how = "SIGTERM"
			trigger = time.Now()
			if err := leader.Terminate(); err != nil {
				w.Stop()
				t.Fatal(err)
			}
		} else {
			trigger = time.Now()
			err := leader.API.Release(g.ctx)
			releases = append(releases, framework.ReleaseCall{Target: leader.Instance, Sent: trigger, Received: time.Now()})
			if err != nil {
				w.Stop()
				t.Fatalf("round %d: %v", round, err)
			}
		}
		freed := nextEvent(t, w, watch.Modified, 10*time.Second, fmt.Sprintf("round %d: the step-down by %s", round, leader.Instance), steppedDown)
		w.Stop()
		var rec struct{ Token, WaitMs int64 }
		var handoff bool
		rec.Token, rec.WaitMs, handoff, _ = stepDownRecord(freed)
		switch {
		case rec.Token != tok.Token:
			t.Fatalf("round %d: %s's step-down record (handoff %v) names token %d, it held %d", round, leader.Instance, handoff, rec.Token, tok.Token)
		case bySIGTERM && rec.WaitMs <= 0:
			t.Fatalf("round %d: the step-down at SIGTERM (--shutdown-handoff after-validity, the default) tells the next leader not to wait: %+v", round, rec)
		case !bySIGTERM && rec.WaitMs != 0:
			t.Fatalf("round %d: POST /release (the app gave the token back) tells the next leader to wait %dms", round, rec.WaitMs)
		}
		if bySIGTERM {
			if code, err := leader.Wait(10 * time.Second); err != nil || code != 0 {
				t.Fatalf("round %d: %s after SIGTERM: exit %d, %v", round, leader.Instance, code, err)
			}
			g.start(leader.Identity()) // its pod restarts: a new process with the same identity
		}
		next, ntok := g.waitLeader(2*testTimings.LeaseDuration+failoverSlack, leader)
		if ntok.Token <= tok.Token {
			t.Fatalf("round %d: %s leads with token %d after token %d", round, next.Instance, ntok.Token, tok.Token)
		}
		summary, claimEnd := g.claimsSummary(leader, trigger, releases)
		if bySIGTERM && !claimEnd.After(trigger) {
			t.Fatalf("round %d: no answer of %s claimed validity past the SIGTERM (the check would prove nothing): %s", round, leader.Instance, summary)
		}
		t.Logf("round %2d: %-13s %s (token %d; release record waitMs %d) -> %s token %d: %s",
			round, how, leader.Instance, tok.Token, rec.WaitMs, next.Instance, ntok.Token, summary)
		leader, tok = next, ntok
	}
	g.waitSampledSince(time.Now())
	checked = true
	valid := g.checkClaims(releases)
	t.Logf("%d handoffs in %v; %d valid /token answers checked against every other process's claims", rounds, time.Since(start).Round(time.Millisecond), valid)
}

// --shutdown-handoff=immediate (flag or ELECTOR_SHUTDOWN_HANDOFF, for a
// native sidecar, stopped after its app): SIGTERM hands the Lease over at
// once. The release record tells followers not to wait (waitMs 0), and a
// follower leads next without waiting out the validity handed out (logged,
// not asserted: the benchmark measures how fast). The token still stops
// before the release is written (the group's overlap check).
func TestShutdownHandoffImmediateHandsOverOnSIGTERM(t *testing.T) {
	g := newGroup(t, testTimings)
	start := func(identity string, byEnv bool) *framework.Candidate {
		spec := g.Template
		spec.Identity = identity
		if byEnv {
			spec.Env = append(spec.Env, "ELECTOR_SHUTDOWN_HANDOFF=immediate")
		} else {
			spec.ExtraArgs = append(spec.ExtraArgs, "--shutdown-handoff=immediate")
		}
		c, err := g.StartSpec(g.ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	byEnv := map[string]bool{"pod-a": false, "pod-b": true, "pod-c": false}
	for _, id := range []string{"pod-a", "pod-b", "pod-c"} {
		start(id, byEnv[id])
	}
	leader, tok := g.waitLeader(startupTimeout)
	for round := 1; round <= 3; round++ {
		g.answerSince(leader, time.Now())
		w, _ := g.watchLease()
		trigger := time.Now()
		if err := leader.Terminate(); err != nil {
			w.Stop()
			t.Fatal(err)
		}
		freed := nextEvent(t, w, watch.Modified, 10*time.Second, fmt.Sprintf("round %d: the step-down by %s", round, leader.Instance), steppedDown)
		w.Stop()
		how := map[bool]string{true: "ELECTOR_SHUTDOWN_HANDOFF=immediate", false: "--shutdown-handoff=immediate"}[byEnv[leader.Identity()]]
		if token, waitMs, handoff, _ := stepDownRecord(freed); waitMs != 0 || token != tok.Token {
			t.Fatalf("round %d: the step-down by %s (%s) at SIGTERM: token %d, waitMs %d (handoff %v), want token %d and no wait", round, leader.Instance, how, token, waitMs, handoff, tok.Token)
		}
		if code, err := leader.Wait(10 * time.Second); err != nil || code != 0 {
			t.Fatalf("round %d: %s after SIGTERM: exit %d, %v", round, leader.Instance, code, err)
		}
		next, ntok := g.waitLeader(testTimings.LeaseDuration+failoverSlack, leader)
		if ntok.Token <= tok.Token {
			t.Fatalf("round %d: %s leads with token %d after token %d", round, next.Instance, ntok.Token, tok.Token)
		}
		summary, _ := g.claimsSummary(leader, trigger, nil)
		t.Logf("round %d: SIGTERM %s (%s, token %d) -> %s token %d: %s", round, leader.Instance, how, tok.Token, next.Instance, ntok.Token, summary)
		start(leader.Identity(), byEnv[leader.Identity()])
		leader, tok = next, ntok
	}
	g.waitFor(5*time.Second, "exactly one leader", g.exactlyOneLeader)
}
