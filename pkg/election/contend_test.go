package election

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// handoffRound is one release seen by many followers, driven in 1 ms steps
// on the fake clock: a write reaches the other candidates' watches
// watchDelay after it landed (the candidate that wrote knows at once).
type handoffRound struct {
	writes     int           // acquiring writes sent after the release, won or lost
	firstWrite time.Duration // from the release to the first acquiring write
	winner     *stepped
}

func runHandoffRound(t *testing.T, api *fakeAPI, leader *stepped, cands []*stepped, watchDelay time.Duration) handoffRound {
	t.Helper()
	if err := leader.stepDown(context.Background(), "test", true); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, api, "the release", "update")
	api.catchUp(cands...) // every follower sees the release at the same instant
	released := api.clock.Now()
	var r handoffRound
	var takenAt time.Time
	for {
		for _, c := range cands {
			c.step()
		}
		calls := api.calls()
		for _, v := range calls {
			if v != "update" {
				t.Fatalf("unexpected %q after the release", v)
			}
		}
		if r.writes == 0 && len(calls) > 0 {
			r.firstWrite = api.clock.Since(released)
		}
		r.writes += len(calls)
		if takenAt.IsZero() && holderOf(api.lease()) != "" {
			takenAt = api.clock.Now()
		}
		if !takenAt.IsZero() && api.clock.Since(takenAt) >= watchDelay {
			api.catchUp(cands...)
			break
		}
		if api.clock.Since(released) > 2*time.Second {
			t.Fatalf("nobody took the released Lease in 2 s (%d writes)", r.writes)
		}
		api.clock.Step(time.Millisecond)
	}
	for _, c := range cands {
		c.step()
		if c.Status().IsLeader {
			if r.winner != nil {
				t.Fatalf("%s and %s both lead", r.winner.cfg.Identity, c.cfg.Identity)
			}
			r.winner = c
		}
	}
	wantCalls(t, api, "once everyone saw the winner")
	if r.winner == nil || holderOf(api.lease()) != r.winner.cfg.Identity {
		t.Fatalf("no leader after the round; lease %+v", api.lease().Spec)
	}
	return r
}

// manyCandidates starts n candidates on a free Lease, each with its own
// seeded draws (draws false: every draw 0, i.e. no spreading), and lets
// the first take it.
func manyCandidates(t *testing.T, n int, draws bool) (*fakeAPI, []*stepped) {
	return manyCandidatesOn(newFakeAPI(t, heldLease("", 1)), n, draws)
}

// manyCandidatesOn is manyCandidates on api, whose Lease is free.
func manyCandidatesOn(api *fakeAPI, n int, draws bool) (*fakeAPI, []*stepped) {
	t := api.t
	t.Helper()
	cands := make([]*stepped, n)
	for i := range cands {
		c := api.stepped(fmt.Sprintf("c%03d", i))
		if draws {
			c.draw = rand.New(rand.NewPCG(12, uint64(i))).Float64
		}
		cands[i] = c.seesStored()
	}
	estimate := api.lease().Annotations[ContendersAnnotation]
	api.waitOutFreeLease()
	cands[0].step()
	wantCalls(t, api, "c000 takes the free Lease", "update")
	keepEstimate(api, estimate)
	api.catchUp(cands...)
	return api, cands
}

// keepEstimate puts the Lease's contenders estimate back to what it was
// before the first acquisition (a Lease found free at start is taken after
// its expiry, a contended acquisition that writes an estimate): the tests
// measure the handoffs after it from the estimate they set up.
func keepEstimate(api *fakeAPI, estimate string) {
	api.handEdit(func(l *coordinationv1.Lease) {
		if estimate == "" {
			delete(l.Annotations, ContendersAnnotation)
		} else {
			l.Annotations[ContendersAnnotation] = estimate
		}
	})
}

func TestAfterAReleaseOnlyAFewOfManyFollowersWrite(t *testing.T) {
	tests := []struct {
		n          int
		watchDelay time.Duration
		// After the first two rounds (the estimate starts at
		// contendersPrior): the median of the acquiring writes per
		// release, and the latest first write after it.
		maxWrites int
		maxFirst  time.Duration
	}{
		{n: 3, watchDelay: 5 * time.Millisecond, maxWrites: 1, maxFirst: 20 * time.Millisecond},
		{n: 10, watchDelay: 5 * time.Millisecond, maxWrites: 4, maxFirst: 30 * time.Millisecond},
		{n: 100, watchDelay: 5 * time.Millisecond, maxWrites: 8, maxFirst: 20 * time.Millisecond},
		// A watch as slow as the first window: nearly every follower
		// writes at first; the losers widen theirs (up to the retry
		// period, 500 ms here, the bound: ~n × delay / 500 ms writes).
		{n: 100, watchDelay: 30 * time.Millisecond, maxWrites: 10, maxFirst: 30 * time.Millisecond},
	}
	for _, tt := range tests {
		watchDelay := tt.watchDelay
		t.Run(fmt.Sprintf("%d candidates, watch delay %v", tt.n, watchDelay), func(t *testing.T) {
			// Without the spread (every draw 0) every follower writes.
			api, cands := manyCandidates(t, tt.n, false)
			if r := runHandoffRound(t, api, cands[0], cands, watchDelay); r.writes != tt.n-1 {
				t.Fatalf("without the spread: %d writes, want %d (every follower)", r.writes, tt.n-1)
			}

			api, cands = manyCandidates(t, tt.n, true)
			leader := cands[0]
			var writes []int
			var firsts []time.Duration
			// Ex-leaders hold off for a lease duration, far longer than
			// the rounds: each round has one contender fewer.
			rounds := min(12, tt.n-1)
			for round := range rounds {
				r := runHandoffRound(t, api, leader, cands, watchDelay)
				writes, firsts = append(writes, r.writes), append(firsts, r.firstWrite)
				l := api.lease()
				t.Logf("round %d: %d writes, first after %v, winner %s, estimate on the Lease %s", round, r.writes, r.firstWrite, r.winner.cfg.Identity, l.Annotations[ContendersAnnotation])
				if contendersOf(l) < 1 {
					t.Fatalf("round %d: the winner wrote no estimate: %v", round, l.Annotations)
				}
				leader = r.winner
			}
			if tt.n == 100 && watchDelay == 5*time.Millisecond && writes[0] > 40 {
				t.Errorf("first release, no estimate yet: %d writes, want <= 40", writes[0])
			}
			later := slices.Clone(writes[min(2, rounds-1):])
			slices.Sort(later)
			if median := later[len(later)/2]; median > tt.maxWrites {
				t.Errorf("after the first two releases: median %d writes per release (%v), want <= %d", median, writes, tt.maxWrites)
			}
			if latest := slices.Max(firsts[min(2, rounds-1):]); latest > tt.maxFirst {
				t.Errorf("after the first two releases: the first write up to %v after the release, want <= %v", latest, tt.maxFirst)
			}
		})
	}
}

func TestExpectedCandidatesSetTheFirstHandoffsWindow(t *testing.T) {
	const watchDelay = 5 * time.Millisecond
	expect := func(n int) func(*Config) { return func(c *Config) { c.ExpectedCandidates = n } }
	firstRound := func(t *testing.T, n int, mutate func(*Config)) handoffRound {
		api := newFakeAPI(t, heldLease("", 1))
		api.mutate = mutate
		api, cands := manyCandidatesOn(api, n, true)
		if contendersOf(api.lease()) != 0 {
			t.Fatalf("the Lease carries an estimate before any handoff: %v", api.lease().Annotations)
		}
		return runHandoffRound(t, api, cands[0], cands, watchDelay)
	}
	t.Run("3 candidates write at once from the first handoff", func(t *testing.T) {
		// Without the hint the prior (16) spreads the first handoffs over
		// 32 ms: the first write comes late.
		if r := firstRound(t, 3, nil); r.firstWrite == 0 {
			t.Fatalf("without the hint the first write came at once; the test cannot tell the hint's effect")
		}
		r := firstRound(t, 3, expect(3))
		if r.firstWrite != 0 || r.writes != 2 {
			t.Fatalf("with 3 expected: first write after %v, %d writes; want at once, both followers", r.firstWrite, r.writes)
		}
	})
	t.Run("100 candidates spread the first handoff for 99", func(t *testing.T) {
		without := firstRound(t, 100, nil)
		with := firstRound(t, 100, expect(100))
		t.Logf("first handoff: %d writes without the hint, %d with 100 expected (first write after %v)", without.writes, with.writes, with.firstWrite)
		if with.writes > 8 || with.writes >= without.writes {
			t.Fatalf("with 100 expected: %d writes on the first handoff, want <= 8 and fewer than without the hint (%d)", with.writes, without.writes)
		}
		if with.firstWrite > 20*time.Millisecond {
			t.Fatalf("with 100 expected: first write after %v, want <= 20ms", with.firstWrite)
		}
	})
	onLeaseWithEstimate := func(t *testing.T, estimate float64, expected int) handoffRound {
		l := heldLease("", 1)
		setContenders(l, estimate) // as earlier handoffs left it
		api := newFakeAPI(t, l)
		api.mutate = expect(expected)
		api, cands := manyCandidatesOn(api, 3, true)
		return runHandoffRound(t, api, cands[0], cands, watchDelay)
	}
	t.Run("the hint is a floor under the Lease's estimate", func(t *testing.T) {
		// Many racing writes bias the winner's draw low; with the hint the
		// estimate never drifts below the group.
		if r := onLeaseWithEstimate(t, 2, 100); r.firstWrite == 0 {
			t.Fatalf("estimate 2 on the Lease, 100 expected: the followers wrote at once, want spread")
		}
		if r := onLeaseWithEstimate(t, 2, 3); r.firstWrite != 0 {
			t.Fatalf("estimate 2 on the Lease, 3 expected: first write after %v, want at once", r.firstWrite)
		}
	})
	t.Run("a Lease estimate above the hint wins", func(t *testing.T) {
		if r := onLeaseWithEstimate(t, 50, 3); r.firstWrite == 0 {
			t.Fatalf("estimate 50 on the Lease, 3 expected: the followers wrote at once, want spread")
		}
	})
}

func TestFollowerThatSawTheLeaseTakenDropsItsAttempt(t *testing.T) {
	api := newFakeAPI(t, heldLease("", 1))
	a := api.stepped("a").seesStored()
	b := api.stepped("b").seesStored()
	c := api.stepped("c").seesStored()
	api.waitOutFreeLease()
	a.step()
	keepEstimate(api, "")
	api.catchUp(b, c)
	b.draw = func() float64 { return 0.1 }
	c.draw = func() float64 { return 0.9 }
	if err := a.stepDown(context.Background(), "test", true); err != nil {
		t.Fatal(err)
	}
	api.calls()
	api.catchUp(b, c)
	// Window: the prior, 16 × 2 ms = 32 ms; b goes after 3.2 ms, c after 28.8 ms.
	if wake := c.step(); wake.Sub(api.clock.Now()) != 28800*time.Microsecond {
		t.Fatalf("c wakes after %v, want 28.8ms", wake.Sub(api.clock.Now()))
	}
	api.clock.Step(4 * time.Millisecond)
	b.step()
	c.step()
	wantCalls(t, api, "b writes, c waits", "update")
	api.catchUp(c)
	api.clock.Step(time.Second)
	c.step()
	wantCalls(t, api, "c saw b's write: it dropped its attempt")
	wantLeads(t, b, 3)
	// b's draw, 0.1, says about 1/0.1 contenders: the estimate moves from 16 towards it.
	if got, want := contendersOf(api.lease()), math.Round(nextContenders(0, 0.1)*10)/10; got != want {
		t.Fatalf("estimate %v, want %v", got, want)
	}
}

func TestNextContendersConvergesOnTheNumberOfFollowers(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 9, 99, 500} {
		est := 0.0
		var logs []float64
		for round := range 400 {
			u := 1.0
			for range n {
				u = min(u, r.Float64())
			}
			est = nextContenders(est, u)
			if round >= 20 {
				logs = append(logs, math.Log(est))
			}
		}
		slices.Sort(logs)
		median := math.Exp(logs[len(logs)/2])
		if median < float64(n)/2 || median > 2*float64(n)+1 {
			t.Errorf("%d followers: median estimate %.1f", n, median)
		}
	}
}

func TestContendersOnTheLease(t *testing.T) {
	for _, tt := range []struct {
		value string
		set   bool
		want  float64
	}{
		{set: false, want: 0},
		{value: "37.5", set: true, want: 37.5},
		{value: "1", set: true, want: 1},
		{value: "0.5", set: true, want: 0},
		{value: "-3", set: true, want: 0},
		{value: "NaN", set: true, want: 0},
		{value: "many", set: true, want: 0},
		{value: "1e9", set: true, want: contendersMax},
		{value: "+Inf", set: true, want: contendersMax},
	} {
		l := &coordinationv1.Lease{}
		if tt.set {
			l.Annotations = map[string]string{ContendersAnnotation: tt.value}
		}
		if got := contendersOf(l); got != tt.want {
			t.Errorf("contenders %q: %v, want %v", tt.value, got, tt.want)
		}
	}
	l := &coordinationv1.Lease{}
	setContenders(l, 12.345)
	if got := l.Annotations[ContendersAnnotation]; got != "12.3" {
		t.Fatalf("written %q", got)
	}
}
