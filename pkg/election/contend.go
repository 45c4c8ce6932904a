package election

import (
	"math"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// Contention. When the Lease becomes takeable (its holder released it while
// we watched, or its term ran out on our clock), every follower learns it
// within a few milliseconds of the others; if all of them wrote at once, one
// write would win and every other one would be a 409 Conflict, and with 100
// candidates that burst delays the winner's own answer. So each follower
// waits a random part of a window before it writes, and drops its attempt
// when the watch shows the Lease taken first (decide then sees a held
// Lease): only the followers whose wait ends within about one watch delay
// of the first writer's write at all.
//
// For that number to stay small the window must grow with the number of
// contenders (n): with a uniform draw over n slots, the first writer goes
// after about one slot whatever n is, and the others that write are those
// in the next watch delay, about delay / slot of them. The watch delay
// itself grows with n (one stream per follower), so the slot does too
// above 20 contenders (contendSlotFor). A
// follower cannot count the others: they never write while they follow,
// and the holders it has seen include processes long gone. So the Lease
// carries the estimate. The winner of each contended acquisition knows its
// own draw u; the first of n uniform draws has E[-ln u] = H(n) ≈ ln n + γ,
// so it writes exp((1-contendGain) ln previous + contendGain (-ln u - γ))
// into ContendersAnnotation with its acquiring write, and every follower
// reads it from the watch. When Config.ExpectedCandidates is set, its
// followers (ExpectedCandidates-1) are the estimate of a Lease without the
// annotation (new, or written by another client) and a floor under the
// annotation's; without it such a Lease uses contendersPrior.
//
// decide stays pure: the draw (state.draw, in [0, 1)) is made by the loop
// each time the election record changes, and the estimate is read from the
// observed Lease (state.contenders).

// ContendersAnnotation is set on the Lease by each contended acquisition:
// the estimated number of followers that contend when the Lease becomes
// takeable (a decimal number).
const ContendersAnnotation = "elector-sidecar.io/contenders"

const (
	// contendSlot is the window per estimated contender (at least).
	contendSlot = 2 * time.Millisecond
	// contendSlotPerWatcher grows the slot with the contenders (see
	// contendSlotFor): 100 contenders, 10 ms slots, a window of 1 s.
	contendSlotPerWatcher = 100 * time.Microsecond
	// contendersPrior is the estimate of a Lease that carries none: the
	// first contended handoff spreads over 32 ms (3 candidates: the first
	// write ~10 ms later than without a window, once; 100 candidates: about
	// a third of them write instead of all).
	contendersPrior = 16
	// contendersMax bounds the estimate (and so the window, with the retry
	// period).
	contendersMax = 1024
	// contendGain is the weight of the latest handoff in the estimate.
	contendGain = 0.5
	// contendUp and contendDown bound one handoff's change of the
	// estimate (logarithms): x2 up, x3/4 down.
	contendUp   = math.Ln2
	contendDown = 0.2876820724517809 // ln(4/3)
	// contendMaxLost bounds the doubling after lost races (x64).
	contendMaxLost = 6
	// contendAtOnce: below this many contenders (estimate and doubling
	// included) followers write at once, as without the spread; the winner
	// then leaves the estimate as it is (its draw was not used). A group
	// of 3 keeps its handoff latency; a loser's doubling brings it back.
	contendAtOnce = 4
	// eulerGamma is the Euler–Mascheroni constant: H(n) - ln n -> γ.
	eulerGamma = 0.5772156649015329
)

// contended reports whether acquiring the observed Lease now is a race
// among followers that decide spreads out: a release this candidate saw
// happen, or a Lease taken when its term ran out on our clock (held, or
// free without a release we saw). Not: an absent Lease, or our own deleted
// term.
func contended(s *state) bool {
	return s.obs != nil && s.term == nil && !s.ownDeletion
}

// priorContenders is the estimate of a Lease that carries none: the
// followers of Config.ExpectedCandidates (all candidates but the one that
// released), or contendersPrior when unknown.
func priorContenders(c *Config) float64 {
	if c.ExpectedCandidates > 0 {
		return min(max(float64(c.ExpectedCandidates-1), 1), contendersMax)
	}
	return contendersPrior
}

// contendersFor is the number of contenders this candidate spreads its
// draw for: the Lease's estimate (priorContenders if none; never below it
// when Config.ExpectedCandidates is set), doubled for
// each race it lost (state.lost). The estimate comes from the winner's
// draw and is right only if the winner wrote first because it drew first;
// when the watch takes longer than the window (a loaded API server, many
// watchers), every follower writes and the winner is any of them, whose
// draw says little. Those losses widen the losers' windows until the
// first write again reaches the others before most of them write; each
// round in which the watch showed the Lease taken before this candidate's
// turn (its window was wide enough) halves it back once. The winner
// writes its own widened estimate, so newcomers start from it.
func contendersFor(s *state, c *Config) float64 {
	n := s.contenders
	switch {
	case n < 1:
		n = priorContenders(c)
	case c.ExpectedCandidates > 0:
		// The hint is a floor, the estimate only learns upwards from it:
		// when many write, the winner is not the lowest draw, its draw
		// says "fewer", and the estimate would drift down handoff by
		// handoff (bench, 100 candidates: 20–40 writes per handoff).
		n = max(n, priorContenders(c))
	}
	return min(n*float64(int(1)<<min(s.lost, contendMaxLost)), contendersMax)
}

// contendWindow is the window the draws spread over for n contenders, at
// most one retry period.
func contendWindow(n float64, c *Config) time.Duration {
	return min(time.Duration(n*float64(contendSlotFor(n))), c.RetryPeriod)
}

// contendSlotFor is the window per contender when n contend: contendSlot,
// or n × contendSlotPerWatcher when that is longer. The writes that race
// are those made before the first write's watch event reached the others,
// about (watch fan-out time) / slot of them, and the fan-out time grows
// with the number of watchers: the API server writes one stream per
// follower and every follower process wakes to read it. A slot that grows
// with n keeps the race to a few writes at 100 candidates (bench: median
// 4 writes per handoff instead of 20–40 with 2 ms) while 10 keep 2 ms.
func contendSlotFor(n float64) time.Duration {
	return max(contendSlot, time.Duration(n*float64(contendSlotPerWatcher)))
}

// spreads reports whether this candidate spreads its write: a contended
// acquisition, and enough contenders (with fewer, a Conflict or two cost
// less than any wait).
func spreads(s *state, c *Config) bool {
	return contended(s) && contendersFor(s, c) >= contendAtOnce
}

// contendDelay is how long after the Lease became takeable (on our clock)
// this candidate writes, unless the watch shows it taken first.
func contendDelay(s *state, c *Config) time.Duration {
	if !spreads(s, c) {
		return 0
	}
	return time.Duration(s.draw * float64(contendWindow(contendersFor(s, c), c)))
}

// nextContenders is the estimate the winner of a contended acquisition
// writes: prev (the contenders it drew for; < 1: contendersPrior) moved
// towards what its draw u says.
func nextContenders(prev, u float64) float64 {
	if prev < 1 {
		prev = contendersPrior
	}
	// u = 0 (or a draw finer than the window can tell) says "many".
	u = max(u, 1.0/(4*contendersMax))
	// One draw is a noisy sample (-ln u has an exponential right tail), and
	// a low one may only mean that the watch was slower than the window
	// (the winner wrote first by chance): one handoff raises the estimate
	// at most x2 and lowers it at most x3/4. Too high costs a little
	// latency (the first write comes after ~window/contenders), too low
	// costs writes.
	sample := min(max(-math.Log(u)-eulerGamma, math.Log(prev)-contendDown/contendGain), math.Log(prev)+contendUp/contendGain)
	n := math.Exp((1-contendGain)*math.Log(prev) + contendGain*sample)
	return min(max(n, 1), contendersMax)
}

// contendersOf reads the estimate on l; 0 when it has none (or a bad one).
func contendersOf(l *coordinationv1.Lease) float64 {
	if l == nil {
		return 0
	}
	v, ok := l.Annotations[ContendersAnnotation]
	if !ok {
		return 0
	}
	n, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(n) || n < 1 {
		return 0
	}
	return min(n, contendersMax)
}

// setContenders records the estimate n on l (a copy about to be written).
func setContenders(l *coordinationv1.Lease, n float64) {
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[ContendersAnnotation] = strconv.FormatFloat(n, 'f', 1, 64)
}
