package shards

// The shard simulator's world: processes (real Sets with their real
// session candidates, stepped in one goroutine), their clocks against the
// global clock, the watch queues and the scheduler. One seed drives it,
// split into named streams (scheduling, faults, delays), so a seed replays
// exactly and one stream's draws do not reshuffle the others.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
)

var simEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const never = time.Duration(1<<63 - 1)

// simEvent is a watch event queued for one process.
type simEvent struct {
	at     time.Duration
	lease  *coordinationv1.Lease // nil with relist: a relist
	prev   *coordinationv1.Lease // for a deletion: the deleted version
	relist bool
}

type simProc struct {
	w     *simWorld
	name  string // instance
	id    string // identity
	set   *Set
	store *setStore
	clk   *testingclock.FakeClock
	// clock = anchorC + (global - anchorG) * rate
	anchorC time.Time
	anchorG time.Duration
	rate    float64
	queue   []simEvent
	wake    time.Duration // next step (never: on an event)
	paused  time.Duration // not stepped, nothing delivered, before this
	cut     time.Duration // every call fails before this
	noList  bool          // its confirming lists fail (a test's fault)
	deaf    bool          // nothing is delivered to it (a test's fault)
	reads   float64       // how often its app reads Status per step
	dead    bool
	leaving bool // SIGTERM: its shards are being handed over
}

func (p *simProc) clockAt(g time.Duration) time.Time {
	return p.anchorC.Add(time.Duration(float64(g-p.anchorG) * p.rate))
}

// toGlobal is the first global instant at which p's clock reads t.
func (p *simProc) toGlobal(t time.Time) time.Duration {
	g := p.anchorG + time.Duration(float64(t.Sub(p.anchorC))/p.rate)
	for p.clockAt(g).Before(t) {
		g++
	}
	return g
}

// enqueue queues a committed change for p, late by a drawn delay but in
// order; a drawn drop loses it and schedules a relist instead.
func (p *simProc) enqueue(prev, l *coordinationv1.Lease) {
	w := p.w
	if p.dead {
		return
	}
	at := w.now + time.Millisecond // a watch event comes after its write
	if w.fault("watch-delay") {
		at += time.Duration(w.delayRand.Int64N(int64(w.cfg.LeaseDuration)))
	}
	if n := len(p.queue); n > 0 {
		at = max(at, p.queue[n-1].at)
	}
	if n := len(p.queue); n > 0 && p.queue[n-1].relist {
		return // a relist is coming: it lists this change
	}
	if w.fault("watch-drop") {
		// The watch breaks: the events queued and this one are lost; a
		// relist follows.
		p.queue = append(p.queue[:0], simEvent{at: at + w.cfg.RetryPeriod, relist: true})
		return
	}
	p.queue = append(p.queue, simEvent{at: at, lease: l, prev: prev})
}

// deliver hands p the events due now.
func (p *simProc) deliver() bool {
	w := p.w
	got := false
	for len(p.queue) > 0 && p.queue[0].at <= w.now && p.paused <= w.now && !p.deaf {
		ev := p.queue[0]
		p.queue = p.queue[1:]
		got = true
		switch {
		case ev.relist:
			var list []any
			for _, l := range w.srv.list() {
				list = append(list, l)
			}
			_ = p.store.Replace(list, "")
			w.tracef(p, "relist (%d Leases)", len(list))
		case ev.lease == nil:
			_ = p.store.Delete(ev.prev)
		default:
			_ = p.store.Update(ev.lease)
		}
	}
	return got
}

type simConfig struct {
	election.Config
	shards int
}

type simWorld struct {
	seed      uint64
	cfg       simConfig
	now       time.Duration
	srv       *simServer
	procs     []*simProc
	chk       *simChecker
	schedRand *rand.Rand
	faultRand *rand.Rand
	delayRand *rand.Rand
	faults    map[string]float64 // enabled kinds and their rates
	out       io.Writer          // the trace (nil: none)
	trace     []string           // the last lines, for a failure
	instances int
	// lastCommitted is each Lease's latest version (nil: deleted), for
	// the deleted version of a delete event.
	lastCommitted map[string]*coordinationv1.Lease
	liveness      bool // faults stopped
}

func (w *simWorld) fault(kind string) bool {
	if w.liveness {
		return false
	}
	r, ok := w.faults[kind]
	return ok && w.faultRand.Float64() < r
}

func (w *simWorld) tracef(p *simProc, format string, args ...any) {
	who := "-"
	if p != nil {
		who = p.name
	}
	line := fmt.Sprintf("%9.3fs %-6s %s", w.now.Seconds(), who, fmt.Sprintf(format, args...))
	if len(w.trace) >= 400 {
		w.trace = w.trace[1:]
	}
	w.trace = append(w.trace, line)
	if w.out != nil {
		fmt.Fprintln(w.out, line)
	}
}

// start adds a member process with this identity.
func (w *simWorld) start(id string) *simProc {
	w.instances++
	p := &simProc{w: w, name: fmt.Sprintf("%s#%d", id, w.instances), id: id, anchorG: w.now, wake: w.now}
	p.rate = 1 + (w.schedRand.Float64()*2-1)*0.01
	if !w.fault("drift") {
		p.rate = 1
	}
	p.anchorC = simEpoch.Add(w.now + time.Duration(w.schedRand.Int64N(int64(time.Hour))))
	p.clk = testingclock.NewFakeClock(p.anchorC)
	p.reads = []float64{1, 0.3, 0.02}[w.schedRand.IntN(3)]
	c := w.cfg.Config
	c.Client, c.Identity, c.Clock = simClient{p}, id, p.clk
	c.Logger = slog.New(slog.DiscardHandler)
	if w.out != nil {
		c.Logger = slog.New(slog.NewTextHandler(w.out, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}})).With("proc", p.name)
	}
	c.ShutdownHandoff = election.HandoffAfterValidity
	if w.schedRand.IntN(4) == 0 {
		c.ShutdownHandoff = election.HandoffImmediate
	}
	s, err := New(Config{Config: c, Shards: w.cfg.shards})
	if err != nil {
		panic(err)
	}
	p.set = s
	p.store = &setStore{s: s, session: s.session.WatchStore()}
	p.queue = []simEvent{{at: w.now, relist: true}}
	w.procs = append(w.procs, p)
	w.chk.process(p)
	w.tracef(p, "start (rate %.4f, app reads %.2f)", p.rate, p.reads)
	return p
}

// step runs p's loop once and samples what its app is told.
func (w *simWorld) step(p *simProc) {
	ctx := context.Background()
	var wake time.Time
	if p.leaving {
		if p.set.cfg.ShutdownHandoff == election.HandoffImmediate {
			// The platform stopped the app first: its answers end here.
			w.chk.appStopped(p)
		}
		p.set.drainInbox()
		p.set.session.Step(ctx)
		p.set.leave(ctx, "shutting down")
		_ = p.set.session.StepShutdown(ctx)
		p.set.deleteSession(ctx)
		p.dead = true
		w.tracef(p, "stopped (SIGTERM)")
		return
	}
	wake = p.set.simStep(ctx)
	p.wake = never
	if !wake.IsZero() {
		p.wake = max(p.toGlobal(wake), w.now+time.Millisecond)
	}
	if w.schedRand.Float64() < p.reads {
		w.chk.sample(p, p.set.Status())
	} else {
		w.chk.unread(p, p.set.peek())
	}
}

func (w *simWorld) live() []*simProc {
	var out []*simProc
	for _, p := range w.procs {
		if !p.dead {
			out = append(out, p)
		}
	}
	return out
}

// advance moves the global clock and every process's clock to g.
func (w *simWorld) advance(g time.Duration) {
	w.now = g
	for _, p := range w.procs {
		if !p.dead {
			p.clk.SetTime(p.clockAt(g))
		}
	}
}

// next is the next global instant anything is due.
func (w *simWorld) next() time.Duration {
	n := never
	for _, p := range w.live() {
		if p.paused > w.now {
			n = min(n, p.paused)
			continue
		}
		n = min(n, p.wake)
		if len(p.queue) > 0 && !p.deaf {
			n = min(n, p.queue[0].at)
		}
	}
	return n
}

// run steps the world until the global clock reaches end, drawing faults
// every tick of the fault clock.
func (w *simWorld) run(end time.Duration, tick time.Duration) {
	nextFault := w.now + tick
	for w.now < end {
		g := min(w.next(), nextFault, end)
		w.advance(max(g, w.now))
		if w.now >= nextFault {
			nextFault += tick
			w.injectFault()
		}
		procs := w.live()
		// Who runs first at one instant is the seed's choice.
		w.schedRand.Shuffle(len(procs), func(i, j int) { procs[i], procs[j] = procs[j], procs[i] })
		for _, p := range procs {
			if p.paused > w.now {
				continue
			}
			got := p.deliver()
			if got || p.wake <= w.now || p.leaving {
				w.step(p)
			}
		}
		if w.chk.failed() {
			return
		}
	}
}

// injectFault draws at most one fault.
func (w *simWorld) injectFault() {
	live := w.live()
	if len(live) == 0 {
		return
	}
	p := live[w.faultRand.IntN(len(live))]
	d := w.cfg.LeaseDuration
	switch {
	case w.fault("crash"):
		p.dead = true
		w.tracef(p, "CRASH")
		if len(w.live()) < 2 || w.faultRand.IntN(2) == 0 {
			id := p.id
			if w.faultRand.IntN(2) == 0 {
				id = fmt.Sprintf("m%d", w.instances+1)
			}
			w.start(id)
		}
	case w.fault("sigterm") && len(live) > 1:
		p.leaving = true
		w.tracef(p, "SIGTERM")
		w.start(fmt.Sprintf("m%d", w.instances+1))
	case w.fault("pause"):
		p.paused = w.now + time.Duration(w.faultRand.Int64N(int64(2*d)))
		w.tracef(p, "PAUSE until %.3fs", p.paused.Seconds())
	case w.fault("cut"):
		p.cut = w.now + time.Duration(w.faultRand.Int64N(int64(2*d)))
		w.tracef(p, "CUT until %.3fs", p.cut.Seconds())
	case w.fault("join") && len(live) < 6:
		w.start(fmt.Sprintf("m%d", w.instances+1))
	case w.fault("delete-shard"):
		name := ShardLeaseName(w.cfg.Name, w.faultRand.IntN(w.cfg.shards))
		if w.srv.leases[name] != nil {
			_ = w.srv.delete(name, nil, "adversary")
			w.tracef(nil, "ADVERSARY deletes %s", name)
		}
	case w.fault("delete-session"):
		name := MemberLeaseName(w.cfg.Name, p.id)
		if w.srv.leases[name] != nil {
			_ = w.srv.delete(name, nil, "adversary")
			w.tracef(nil, "ADVERSARY deletes %s", name)
		}
	}
}

// faultKinds are the kinds a seed draws from (swarm testing).
var faultKinds = []string{"crash", "sigterm", "pause", "cut", "join", "lost-answer", "watch-delay", "watch-drop", "drift", "delete-shard", "delete-session"}

// drawFaults enables a random non-empty subset, each at its own rate.
func drawFaults(r *rand.Rand, only string) map[string]float64 {
	out := map[string]float64{}
	if only != "" {
		for _, k := range strings.Split(only, ",") {
			out[k] = 0.3
		}
		return out
	}
	for len(out) == 0 {
		for _, k := range faultKinds {
			if r.IntN(2) == 0 {
				out[k] = []float64{0.02, 0.1, 0.3}[r.IntN(3)]
			}
		}
	}
	return out
}

func (w *simWorld) describeFaults() string {
	var parts []string
	for _, k := range slices.Sorted(mapKeys(w.faults)) {
		parts = append(parts, fmt.Sprintf("%s=%.2f", k, w.faults[k]))
	}
	return strings.Join(parts, " ")
}
