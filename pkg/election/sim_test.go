package election

// The deterministic simulator of the election (docs/simulation.md): 2-7
// real candidates on virtual clocks against a simulated API server, with
// faults and an adversary drawn per seed, the app's claims checked on the
// global clock after every step, then a liveness phase.
//
//	go test ./pkg/election -run '^TestSimulation$' -sim.seeds=2000
//	go test ./pkg/election -run '^TestSimulation$' -sim.seed=N -v     replay one seed, full trace
//	go test ./pkg/election -run '^TestSimulation$' -sim.duration=10m   random seeds until the time is up

import (
	"flag"
	"fmt"
	"hash"
	"hash/fnv"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	simSeed      = flag.Uint64("sim.seed", 0, "replay this one seed and print its whole trace")
	simSeeds     = flag.Int("sim.seeds", 40, "how many seeds TestSimulation runs (from -sim.base)")
	simBase      = flag.Uint64("sim.base", 1, "the first seed of -sim.seeds")
	simDuration  = flag.Duration("sim.duration", 0, "run random seeds until this time is up (overrides -sim.seeds)")
	simStopFirst = flag.Bool("sim.stopfirst", false, "stop at the first failing seed and report seeds until failure and time")
	simMixed     = flag.Bool("sim.mixed", false, "scenario: processes draw one of two configs (lease durations differ); see docs/simulation.md, N7")
	simMaxInt    = flag.Bool("sim.maxint", false, "scenario N5: the adversary may raise leaseTransitions to MaxInt32; the operator resets it (TransitionsResetAnnotation) when the liveness phase starts")
	simHandoff   = flag.String("sim.handoff", "", "every process's Config.ShutdownHandoff (after-validity or immediate); default: drawn per process, immediate one time in four")
	simDirect    = flag.String("sim.direct", "", "every process's Config.DirectHandoff (on or off); default: drawn per process, on three times in four")
	simFaults    = flag.String("sim.faults", "", "enable exactly these fault kinds (comma-separated, each name or name=weight) instead of a random subset")
)

type simCfg struct{ ld, rd, rp, skew time.Duration }

type simWorld struct {
	seed                 uint64
	opts                 simOpts
	cfgs                 []simCfg
	sched, api, adv, flt *rand.Rand
	now                  time.Duration
	srv                  *simServer
	chk                  *simChecker
	procs                []*simProc
	timers               []simTimer
	enabled              [numSimFaults]bool
	weight               [numSimFaults]float64
	lostP, readErrP      float64
	delayMax, faultEvery time.Duration
	maxDrift             float64
	expected, ids        int
	nextFault, liveAt    time.Duration
	end, bound, longest  time.Duration
	outage               time.Duration // the API server is down until then
	guard                *simProc      // a knower of the highest token kept running until guardUntil
	guardUntil           time.Duration
	live, unavailable    bool
	steps                int
	err                  error
	trace                simTrace
	line                 []byte
}

func drawSimCfg(r *rand.Rand) simCfg {
	lds := []time.Duration{2 * time.Second, 3 * time.Second, 5 * time.Second, 8 * time.Second}
	u := func(lo, hi float64, d time.Duration) time.Duration {
		return (time.Duration((lo+(hi-lo)*r.Float64())*float64(d)) / (10 * time.Millisecond)) * 10 * time.Millisecond
	}
	c := simCfg{ld: lds[r.IntN(len(lds))]}
	c.rd = u(0.5, 0.85, c.ld)
	c.rp = u(0.2, 0.75, c.rd)
	c.skew = max(u(0.03, 0.15, c.ld), 50*time.Millisecond)
	return c
}

// newSimWorld draws everything about one seed from its faults stream:
// configs, the enabled fault kinds and weights (forced: -sim.faults), the
// rates, the first processes and Lease.
func newSimWorld(seed uint64, opts simOpts, keepTrace bool) *simWorld {
	stream := func(name string) *rand.Rand {
		h := fnv.New64a()
		_, _ = h.Write([]byte(name))
		return rand.New(rand.NewPCG(seed, h.Sum64()))
	}
	w := &simWorld{seed: seed, opts: opts, sched: stream("scheduler"), api: stream("apiserver"), adv: stream("adversary"), flt: stream("faults")}
	w.trace = simTrace{h: fnv.New64a(), all: keepTrace}
	w.srv = &simServer{w: w, leases: map[string]*coordinationv1.Lease{}}
	w.chk = newSimChecker()
	r := w.flt
	w.cfgs = []simCfg{drawSimCfg(r)}
	if opts.mixed {
		w.cfgs = append(w.cfgs, drawSimCfg(r)) // mixed configs
	}
	w.maxDrift = 1
	for _, c := range w.cfgs {
		// |r-1| * LeaseDuration < ClockSkewMargin/2, for every config.
		w.maxDrift = min(w.maxDrift, 0.99*float64(c.skew)/(2*float64(c.ld)))
	}
	if opts.faults != "" {
		for _, f := range strings.Split(opts.faults, ",") {
			name, wt, _ := strings.Cut(strings.TrimSpace(f), "=")
			k := simFaultByName(name)
			w.enabled[k], w.weight[k] = true, 1
			if x, err := strconv.ParseFloat(wt, 64); err == nil {
				w.weight[k] = x
			}
		}
	} else {
		for !slicesContains(w.enabled[:], true) {
			for f := range numSimFaults {
				w.enabled[f] = r.IntN(2) == 0
				w.weight[f] = float64(1 + r.IntN(10))
			}
		}
	}
	n := 2 + r.IntN(6)
	if r.IntN(2) == 0 {
		w.expected = n
	}
	w.lostP, w.readErrP = 0.02+0.25*r.Float64(), 0.02+0.25*r.Float64()
	w.delayMax = time.Millisecond
	if w.enabled[fWatchDelay] {
		w.delayMax = time.Duration(float64(w.cfgs[0].ld) * 0.3 * r.Float64())
	}
	w.faultEvery = time.Duration(float64(w.cfgs[0].ld) * (0.2 + 1.3*r.Float64()))
	w.nextFault = time.Duration(r.ExpFloat64() * float64(w.faultEvery))
	w.liveAt = time.Duration(float64(w.cfgs[0].ld) * (8 + 16*r.Float64()))
	w.end = simNever
	w.tracef(nil, "seed", "%d: %s", seed, w.describe(n))
	switch r.IntN(4) {
	case 0, 1:
	default:
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leaseName, Namespace: ns},
			Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: leaseSeconds(w.cfgs[0].ld), LeaseTransitions: ptr(int32(r.IntN(10)))}}
		if r.IntN(2) == 0 {
			l.Spec.HolderIdentity = ptr("stranger")
		}
		_, _ = w.srv.create(nil, l, simAdversary)
		w.tracef(nil, "existing", "")
	}
	for w.ids < n {
		w.ids++
		w.start(string(rune('a' + w.ids - 1)))
	}
	return w
}

func (w *simWorld) describe(n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d processes, expected %d, configs", n, w.expected)
	for _, c := range w.cfgs {
		fmt.Fprintf(&b, " [ld %v rd %v rp %v skew %v]", c.ld, c.rd, c.rp, c.skew)
	}
	fmt.Fprintf(&b, ", safety phase %v, a fault every %v; faults:", w.liveAt.Round(time.Millisecond), w.faultEvery.Round(time.Millisecond))
	for f := range numSimFaults {
		if w.enabled[f] {
			fmt.Fprintf(&b, " %s=%g", f, w.weight[f])
		}
	}
	fmt.Fprintf(&b, " (lost %.2f, read errors %.2f, watch delay <= %v, drift <= %.5f)", w.lostP, w.readErrP, w.delayMax, w.maxDrift)
	return b.String()
}

func simFaultByName(name string) simFault {
	for f := range numSimFaults {
		if f.String() == name {
			return f
		}
	}
	panic(fmt.Sprintf("unknown fault kind %q; kinds: %s", name, strings.Join(simFaultNames[:], ", ")))
}

func slicesContains(s []bool, v bool) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// simTrace hashes every line and keeps the last ones (all: every one).
type simTrace struct {
	h    hash.Hash64
	all  bool
	text []byte
	ring [150][]byte
	n    int
}

func (t *simTrace) add(line []byte) {
	_, _ = t.h.Write(line)
	if t.all {
		t.text = append(t.text, line...)
		return
	}
	i := t.n % len(t.ring)
	t.ring[i] = append(t.ring[i][:0], line...)
	t.n++
}

func (t *simTrace) String() string {
	if t.all {
		return string(t.text)
	}
	var b strings.Builder
	if t.n > len(t.ring) {
		fmt.Fprintf(&b, "... (%d earlier lines)\n", t.n-len(t.ring))
	}
	for i := max(0, t.n-len(t.ring)); i < t.n; i++ {
		b.Write(t.ring[i%len(t.ring)])
	}
	return b.String()
}

type simResult struct {
	seed  uint64
	steps int
	hash  uint64
	err   error
	trace string
}

func runSimSeed(seed uint64, opts simOpts, keepTrace bool) simResult {
	w := newSimWorld(seed, opts, keepTrace)
	err := w.run()
	r := simResult{seed: seed, steps: w.steps, hash: w.trace.h.Sum64(), err: err}
	if err != nil || keepTrace {
		r.trace = w.trace.String()
	}
	return r
}

func simReplay(seed uint64, o simOpts) string {
	return fmt.Sprintf("go test ./pkg/election -run '^TestSimulation$' -v -sim.seed=%d%s", seed, o)
}

func TestSimulation(t *testing.T) {
	if *simSeed != 0 {
		r := runSimSeed(*simSeed, flagSimOpts(), true)
		t.Logf("trace hash %016x, %d steps\n%s", r.hash, r.steps, r.trace)
		if r.err != nil {
			t.Fatalf("seed %d: %v\nreplay: %s", r.seed, r.err, simReplay(r.seed, flagSimOpts()))
		}
		return
	}
	base, count := *simBase, *simSeeds
	if *simDuration > 0 {
		base, count = uint64(time.Now().UnixNano())&(1<<62-1), 1<<40
		t.Logf("random seeds from %d for %v", base, *simDuration)
	}
	start := time.Now()
	var (
		mu       sync.Mutex
		next     int
		done     int
		steps    int
		failures []simResult
		firstBad = -1
		wg       sync.WaitGroup
	)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() { // seeds in parallel; each simulation is one goroutine
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				stop := i >= count || (*simStopFirst && firstBad >= 0) || (*simDuration > 0 && time.Since(start) > *simDuration)
				next++
				mu.Unlock()
				if stop {
					return
				}
				r := runSimSeed(base+uint64(i), flagSimOpts(), false)
				mu.Lock()
				done++
				steps += r.steps
				if r.err != nil {
					failures = append(failures, r)
					if firstBad < 0 || i < firstBad {
						firstBad = i
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	t.Logf("%d seeds, %d steps in %v: %.0f seeds/s, %.0f steps/s", done, steps, el.Round(time.Millisecond),
		float64(done)/el.Seconds(), float64(steps)/el.Seconds())
	if len(failures) == 0 {
		return
	}
	first := failures[0]
	for _, f := range failures {
		if f.seed < first.seed {
			first = f
		}
	}
	var seeds []string
	for _, f := range failures {
		seeds = append(seeds, strconv.FormatUint(f.seed, 10))
	}
	if *simStopFirst {
		t.Logf("first failure: seed %d, after %d seeds, %v", first.seed, firstBad+1, el.Round(time.Millisecond))
	}
	t.Fatalf("%d of %d seeds failed (%s); the first, seed %d: %v\n%s\nreplay: %s",
		len(failures), done, strings.Join(seeds, " "), first.seed, first.err, first.trace, simReplay(first.seed, flagSimOpts()))
}

// The same seed gives the same run: trace hashes compared.
func TestSimulationReplaysExactly(t *testing.T) {
	for _, seed := range []uint64{1, 7, 12345} {
		a, b := runSimSeed(seed, simOpts{}, false), runSimSeed(seed, simOpts{}, true)
		if a.hash != b.hash || a.steps != b.steps {
			t.Fatalf("seed %d: trace hash %016x (%d steps), then %016x (%d steps)", seed, a.hash, a.steps, b.hash, b.steps)
		}
	}
}
