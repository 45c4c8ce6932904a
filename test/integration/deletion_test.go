package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// The Lease deleted in the middle of a handoff, round after round: the leader
// steps down (SIGTERM or POST /release), and the Lease is deleted the moment
// its release lands, a few milliseconds later, or right after a follower's
// acquire lands, while the followers race to take it; in some rounds that
// follower is frozen (SIGSTOP) from its acquire until after the deletion, so
// it still serves its new, valid token when it wakes. Each deletion leaves
// several candidates with different views of the last Lease (released,
// taken, a lost race); whoever restores or recreates it must never issue a
// token value another process already served (under the deleted Lease's UID
// or any other), and tokens must keep growing.
//
// Besides the invariants every test checks (no overlap of valid tokens
// between processes, later tokens greater), this test checks over the whole
// run that a token value was served by one process only (the sampler), and
// that no two processes logged "became leader" with the same token (which
// also catches a term too short for the sampler to see).
func TestLeaseDeletedDuringHandoffNeverDuplicatesToken(t *testing.T) {
	const rounds = 30
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed^0xde1e7e))
	t.Logf("%d rounds, seed %d", rounds, seed)

	g := newGroup(t, testTimings)
	// Over the whole run, also when a round failed (the group's cleanup
	// checks the sampler's invariants, a token value served by two processes
	// among them). Terms too short to be sampled show in the logs.
	t.Cleanup(func() {
		if dups := duplicateAcquisitions(g.All()); len(dups) > 0 {
			t.Errorf("a token value was acquired more than once (the processes' \"became leader\" log lines):\n  %s", strings.Join(dups, "\n  "))
		}
	})
	g.start("pod-a", "pod-b", "pod-c")
	leader, tok := g.waitLeader(startupTimeout)
	g.waitAllSee(leader, tok.Token)
	leases := env.cp.Client.CoordinationV1().Leases(g.namespace)
	start := time.Now()

	for round := 1; round <= rounds; round++ {
		// Alternate the way the leader steps down and the moment of the
		// deletion: {SIGTERM, POST /release} x {on the release, on the next
		// acquire, on the next acquire with the acquirer frozen}.
		byTerm := round%2 == 1
		onAcquire := (round/2)%3 != 0
		freeze := (round/2)%3 == 2
		// The delay after the triggering event is the scenario itself (the
		// deletion lands before, during or after the followers' writes), not a wait.
		var delay, frozenFor time.Duration
		if freeze {
			// Shorter than the acquirer's validity (lease duration - clock skew margin).
			frozenFor = 200*time.Millisecond + time.Duration(rng.IntN(1300))*time.Millisecond
		}
		if onAcquire {
			delay = time.Duration(rng.IntN(5000)) * time.Microsecond
		} else {
			delay = time.Duration(rng.IntN(30000)) * time.Microsecond
		}
		floor := g.maxToken()
		leaderTok := tok.Token
		roundStart := time.Now()

		cur, err := leases.Get(g.ctx, g.lease, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		w, err := leases.Watch(g.ctx, metav1.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", g.lease).String(),
			ResourceVersion: cur.ResourceVersion,
		})
		if err != nil {
			t.Fatalf("round %d: watch: %v", round, err)
		}
		how := "POST /release"
		releaseErr := make(chan error, 1)
		if byTerm {
			how = "SIGTERM"
			releaseErr <- leader.Terminate()
		} else {
			go func(c *framework.Candidate) { releaseErr <- c.API.Release(g.ctx) }(leader)
		}

		// The step-down lands on the same Lease: a release (holder empty)
		// or a direct handoff (held by a successor that has not accepted).
		released := nextEvent(t, w, watch.Modified, 5*time.Second, fmt.Sprintf("round %d: the step-down by %s", round, leader.Instance), steppedDown)
		trigger := "release"
		var frozen *framework.Candidate
		if onAcquire {
			acq := nextEvent(t, w, watch.Modified, 5*time.Second, fmt.Sprintf("round %d: a follower's acquire after the step-down", round), func(l *coordinationv1.Lease) bool {
				return acquiredAfter(released, l)
			})
			trigger = "acquire"
			if freeze {
				if frozen = g.Get(framework.HolderOf(acq)); frozen == nil || frozen.Exited() {
					t.Fatalf("round %d: the acquirer %q is not a running candidate", round, framework.HolderOf(acq))
				}
				if err := frozen.Pause(); err != nil {
					t.Fatalf("round %d: SIGSTOP %s: %v", round, frozen.Instance, err)
				}
				trigger = fmt.Sprintf("acquire by %s, frozen until %v after the deletion", frozen.Instance, frozenFor.Round(time.Millisecond))
			}
		}
		time.Sleep(delay) // deliberate: part of the scenario (see above)
		uid := released.UID
		if err := leases.Delete(g.ctx, g.lease, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil {
			w.Stop()
			t.Fatalf("round %d: delete the Lease: %v\n%s", round, err, g.Describe(g.ctx))
		}
		deletedAt := time.Now()
		// The DELETED event carries the Lease as it was when it went.
		gone := nextEvent(t, w, watch.Deleted, 5*time.Second, fmt.Sprintf("round %d: the deletion", round), nil)
		w.Stop()
		if frozen != nil {
			// Deliberate: the freeze's length is the scenario (the frozen
			// holder wakes with a valid token on the deleted Lease).
			time.Sleep(frozenFor)
			if err := frozen.Resume(); err != nil {
				t.Fatalf("round %d: SIGCONT %s: %v", round, frozen.Instance, err)
			}
		}
		if err := <-releaseErr; err != nil {
			t.Fatalf("round %d: %s %s: %v", round, how, leader.Instance, err)
		}

		// A terminated leader exits 0 (it released first) and comes back
		// with the same identity, as a new process.
		if byTerm {
			code, err := leader.Wait(5 * time.Second)
			if err != nil || code != 0 {
				t.Fatalf("round %d: %s after SIGTERM: exit %d, %v", round, leader.Instance, code, err)
			}
			g.start(leader.Identity())
		}

		// Liveness: someone leads again with a token above every token
		// served before, on the Lease that now exists (a holder frozen over
		// the deletion wakes up still serving its term on the deleted one),
		// and every candidate follows that term.
		var next *framework.Candidate
		var nextTok int64
		g.waitFor(2*testTimings.LeaseDuration+failoverSlack, fmt.Sprintf("round %d: one leader with a token above %d that every candidate follows", round, floor), func(ctx context.Context) error {
			leaders := g.Leaders(ctx)
			if len(leaders) != 1 {
				return fmt.Errorf("%d processes serve a token: %v", len(leaders), leaders)
			}
			r := leaders[0].Token(ctx)
			if !r.Valid() || r.Token <= floor {
				return fmt.Errorf("%s: /token %s", leaders[0].Instance, r)
			}
			l, err := env.cp.GetLease(ctx, g.namespace, g.lease)
			if err != nil {
				return err
			}
			if holder, transitions := framework.LeaseHolder(l); holder != leaders[0].Identity() || transitions != r.Token || string(l.UID) != r.LeaseUID {
				return fmt.Errorf("%s serves token %d on Lease UID %s; the Lease is holder %q, leaseTransitions %d, UID %s",
					leaders[0].Instance, r.Token, r.LeaseUID, holder, transitions, l.UID)
			}
			next, nextTok = leaders[0], r.Token
			return g.allSee(ctx, next, nextTok)
		})
		settled := time.Since(deletedAt)
		// Safety: the deleted Lease's holder may have served its count (an
		// acquire that landed just before the deletion), so the next term
		// must be above it, whoever restored or recreated the Lease.
		if goneCount := framework.TransitionsOf(gone); nextTok <= goneCount {
			t.Errorf("round %d: the Lease was deleted at leaseTransitions %d (holder %q), and then %s leads with token %d: a count of the deleted Lease was issued again",
				round, goneCount, framework.HolderOf(gone), next.Instance, nextTok)
		}
		t.Logf("round %2d: %-13s of %s (token %d), Lease deleted %v after the %s, %v after the step-down (holder %q, leaseTransitions %d, UID %.8s); %s leads with token %d (settled %v after the deletion)",
			round, how, leader.Instance, leaderTok, delay.Round(100*time.Microsecond), trigger, deletedAt.Sub(roundStart).Round(time.Millisecond),
			framework.HolderOf(gone), framework.TransitionsOf(gone), gone.UID, next.Instance, nextTok, settled.Round(time.Millisecond))
		leader, tok.Token = next, nextTok
	}
	t.Logf("%d rounds in %v", rounds, time.Since(start).Round(time.Second))

	// Every process that served a token has been asked since the last
	// round settled (the checks run in the cleanup above).
	g.waitSampledSince(time.Now())
}

// nextEvent reads w until an event of type typ whose Lease satisfies match
// (nil: any), and returns that Lease. It fails the test on an error event, a
// closed watch, a timeout, and, when waiting for anything but a deletion, on
// a deletion by someone else.
func nextEvent(t *testing.T, w watch.Interface, typ watch.EventType, timeout time.Duration, what string, match func(*coordinationv1.Lease) bool) *coordinationv1.Lease {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("%s: the watch closed", what)
			}
			l, isLease := ev.Object.(*coordinationv1.Lease)
			switch {
			case ev.Type == watch.Error || !isLease:
				t.Fatalf("%s: watch event %s %v", what, ev.Type, ev.Object)
			case ev.Type == watch.Deleted && typ != watch.Deleted:
				t.Fatalf("%s: the Lease was deleted by someone else", what)
			case (ev.Type == typ || typ == watch.Modified && ev.Type == watch.Added) && (match == nil || match(l)):
				return l
			}
		case <-timer.C:
			t.Fatalf("%s: not seen within %v", what, timeout)
		}
	}
}

var (
	becameLeaderRE = regexp.MustCompile(`msg="became leader"`)
	tokenAttrRE    = regexp.MustCompile(`\btoken=(\d+)`)
	leaseUIDAttrRE = regexp.MustCompile(`\bleaseUID=(\S+)`)
)

// duplicateAcquisitions reads every process's log for "became leader" lines
// and returns, per token value acquired more than once (by two processes, or
// by one process on two Leases), a line naming each acquisition.
func duplicateAcquisitions(cs []*framework.Candidate) []string {
	byToken := map[int64][]string{}
	for _, c := range cs {
		for _, line := range strings.Split(c.Logs(), "\n") {
			if !becameLeaderRE.MatchString(line) {
				continue
			}
			m := tokenAttrRE.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			tok, _ := strconv.ParseInt(m[1], 10, 64)
			who := c.Instance
			if u := leaseUIDAttrRE.FindStringSubmatch(line); u != nil {
				who += " on Lease UID " + u[1]
			}
			byToken[tok] = append(byToken[tok], who)
		}
	}
	var tokens []int64
	for tok, who := range byToken {
		if len(who) > 1 {
			tokens = append(tokens, tok)
		}
	}
	sort.Slice(tokens, func(i, j int) bool { return tokens[i] < tokens[j] })
	var out []string
	for _, tok := range tokens {
		out = append(out, fmt.Sprintf("token %d: %s", tok, strings.Join(byToken[tok], ", ")))
	}
	return out
}
