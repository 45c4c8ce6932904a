package election

// The simulator's world: processes (real Electors, driven like `stepped`),
// their clocks, the global clock and the scheduler. One goroutine; every
// choice comes from one of the seed's named streams; nothing iterates a map.

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"math/rand/v2"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	testingclock "k8s.io/utils/clock/testing"
)

// simEpoch is global time zero.
var simEpoch = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)

const simNever = time.Duration(math.MaxInt64)

var simLogger = slog.New(slog.DiscardHandler)

// simProc is one process: an Elector, its informer's store and watch
// queue, and its clock (rate against the global clock).
type simProc struct {
	w        *simWorld
	name, id string
	e        *Elector
	store    *leaseStore
	clk      *testingclock.FakeClock
	anchorG  time.Duration
	anchorC  time.Time
	rate     float64
	cfg      *simCfg
	wake     time.Duration // next timer (global); simNever: on an event only
	dead     bool
	paused   time.Duration // SIGSTOPped until then
	queue    []simEvent
	broken   bool // no watch: (re)list at relistAt
	relistAt time.Duration
	lagUntil time.Duration
	lagExtra time.Duration
	lastAt   time.Duration // delivery time of the last queued event
	calls    []string      // API calls of the current step, for the trace
}

func (p *simProc) clockAt(g time.Duration) time.Time {
	if p.rate == 1 {
		return p.anchorC.Add(g - p.anchorG)
	}
	return p.anchorC.Add(time.Duration(float64(g-p.anchorG) * p.rate))
}

// toGlobal is the first global instant at which p's clock reads t or later.
func (p *simProc) toGlobal(t time.Time) time.Duration {
	d := t.Sub(p.anchorC)
	g := p.anchorG + d
	if p.rate != 1 {
		g = p.anchorG + time.Duration(math.Ceil(float64(d)/p.rate))
	}
	for p.clockAt(g).Before(t) {
		g++
	}
	return max(g, p.w.now)
}

func (p *simProc) setRate(r float64) {
	p.anchorC, p.anchorG, p.rate = p.clockAt(p.w.now), p.w.now, r
}

func (p *simProc) call(s string) { p.calls = append(p.calls, s) }

func (p *simProc) isPaused() bool { return p.w.now < p.paused }

// due is when p next needs a step (simNever: not before an event).
func (p *simProc) due() time.Duration {
	if p.dead {
		return simNever
	}
	d := p.wake
	if p.broken {
		d = min(d, p.relistAt)
	} else if len(p.queue) > 0 {
		d = min(d, p.queue[0].at)
	}
	if d != simNever && p.isPaused() {
		d = max(d, p.paused)
	}
	return d
}

// start begins a new process with identity id.
func (w *simWorld) start(id string) *simProc {
	n := 1
	for _, q := range w.procs {
		if q.id == id {
			n++
		}
	}
	p := &simProc{w: w, name: fmt.Sprintf("%s#%d", id, n), id: id, wake: simNever, broken: true}
	h := fnv.New64a()
	_, _ = h.Write([]byte(p.name))
	own := rand.New(rand.NewPCG(w.seed, h.Sum64()))
	p.cfg = &w.cfgs[own.IntN(len(w.cfgs))]
	p.rate = 1
	if w.enabled[fDrift] && !w.live {
		p.rate = 1 + (2*own.Float64()-1)*w.maxDrift
	}
	p.anchorG, p.anchorC = w.now, simEpoch.Add(time.Duration(own.Int64N(int64(time.Hour))))
	p.clk = testingclock.NewFakeClock(p.anchorC)
	handoff := HandoffAfterValidity
	if own.IntN(4) == 0 {
		handoff = HandoffImmediate
	}
	if w.opts.handoff != "" {
		handoff = Handoff(w.opts.handoff)
	}
	// Drawn apart from own, whose draws the seeds of findings.txt keep.
	direct := rand.New(rand.NewPCG(w.seed^0xd14ec7, h.Sum64())).IntN(4) != 0
	switch w.opts.direct {
	case "on":
		direct = true
	case "off":
		direct = false
	}
	c := p.cfg
	e, err := New(Config{
		Client: simClient{p}, Namespace: ns, Name: leaseName, Identity: id,
		LeaseDuration: c.ld, RenewDeadline: c.rd, RetryPeriod: c.rp, ClockSkewMargin: c.skew,
		ExpectedCandidates: w.expected, Clock: p.clk, Logger: simLogger, ShutdownHandoff: handoff,
		DirectHandoff: direct,
	})
	if err != nil {
		panic(fmt.Sprintf("simulator config %+v: %v", *c, err))
	}
	e.draw = own.Float64
	e.st.incarnation = fmt.Sprintf("%016x", own.Uint64())
	p.e, p.store = e, &leaseStore{e: e}
	p.relistAt = w.now + time.Duration(w.api.Int64N(int64(200*time.Millisecond)))
	w.procs = append(w.procs, p)
	w.chk.process(p.name, p.id)
	w.tracef(p, "start", "handoff=%s direct=%t rate=%.5f ld=%v", handoff, direct, p.rate, c.ld)
	return p
}

// alive lists the processes that run, in start order.
func (w *simWorld) alive() []*simProc {
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

// fanOut queues the change prev -> l (nil: deleted) on every watch, in
// commit order, each with its own delay (lag, never reordering).
func (w *simWorld) fanOut(prev, l *coordinationv1.Lease) {
	ev := simEvent{lease: l}
	if l == nil {
		if prev == nil {
			return
		}
		ev = simEvent{deleted: true, lease: prev}
	}
	for _, p := range w.procs {
		if p.dead || p.broken {
			continue
		}
		if len(p.queue) > 100 { // a watcher that does not read: the API server drops it
			w.dropWatch(p, "slow")
			continue
		}
		d := time.Duration(w.api.Int64N(int64(w.delayMax) + 1))
		if w.now < p.lagUntil {
			d += p.lagExtra
		}
		e := ev
		e.at = max(w.now+d, p.lastAt)
		p.lastAt = e.at
		p.queue = append(p.queue, e)
	}
}

func (w *simWorld) dropWatch(p *simProc, why string) {
	p.queue, p.broken = nil, true
	p.relistAt = w.now + time.Duration(w.api.Int64N(int64(p.cfg.rp)+1))
	w.tracef(p, "watch-drop", "%s, relist at %.3f", why, p.relistAt.Seconds())
}

// step is one turn of p's loop: a relist or some of its due watch events
// into its leaseStore, drainInbox, then process and publish.
func (w *simWorld) step(p *simProc) {
	p.calls = p.calls[:0]
	what := "timer"
	if p.broken && p.relistAt <= w.now && w.now < w.outage {
		p.relistAt = w.outage + time.Duration(w.api.Int64N(int64(p.cfg.rp)+1)) // the list fails: retry after the outage
		what = "list:down"
	} else if p.broken && p.relistAt <= w.now {
		var list []any
		if l := w.srv.stored(leaseName); l != nil {
			list = append(list, l.DeepCopy())
		}
		_ = p.store.Replace(list, "")
		p.broken, p.queue, p.lastAt = false, nil, w.now
		what = fmt.Sprintf("list(%d)", len(list))
	} else if !p.broken {
		k := 0
		for k < len(p.queue) && p.queue[k].at <= w.now {
			k++
		}
		if k > 0 {
			k = 1 + w.sched.IntN(k) // some of the due events (the rest: next turn)
			for _, ev := range p.queue[:k] {
				if ev.deleted {
					_ = p.store.Delete(ev.lease)
				} else {
					_ = p.store.Update(ev.lease)
				}
			}
			p.queue = p.queue[k:]
			what = fmt.Sprintf("watch(%d)", k)
		}
	}
	p.e.drainInbox()
	w.process(p)
	w.tracef(p, what, "%v", p.calls)
	w.sample(p)
}

// process runs p's decide/execute loop and sets its next wake-up.
func (w *simWorld) process(p *simProc) {
	ctx := context.Background()
	wake := p.e.process(ctx, ctx)
	p.e.publish()
	p.wake = simNever
	if !wake.IsZero() {
		// Scheduling latency: a timer fires up to 2 ms late.
		p.wake = p.toGlobal(wake) + time.Duration(w.sched.Int64N(int64(2*time.Millisecond)))
	}
}

// sample records p's answer to its app, if it leads, with the checker.
func (w *simWorld) sample(p *simProc) {
	if p.dead || p.isPaused() || w.err != nil {
		return
	}
	if err := w.chk.observe(p.name, p.e.Status(), w.now, p.rate); err != nil {
		w.fail(err)
	}
}

func (w *simWorld) fail(err error) {
	if w.err == nil {
		w.err = err
		w.tracef(nil, "VIOLATION", "%v", err)
	}
}

// run drives the world to its end or the first violation.
func (w *simWorld) run() error {
	for w.err == nil {
		next := min(w.end, w.nextFault, w.liveAt, w.timerDue())
		if len(w.srv.pending) > 0 {
			for _, pw := range w.srv.pending {
				next = min(next, pw.at)
			}
		}
		for _, p := range w.procs {
			next = min(next, p.due())
		}
		next = max(next, w.now) // a process resumed with events already due
		if next >= w.end {
			w.advance(w.end)
			w.checkLiveness()
			return w.err
		}
		w.advance(next)
		if w.steps++; w.steps > 400000 {
			w.fail(fmt.Errorf("the simulation made no progress (%d steps at %v)", w.steps, w.now))
			break
		}
		w.runDue()
		w.noteReset()
	}
	return w.err
}

// runDue runs everything due now, in an order the scheduler draws.
func (w *simWorld) runDue() {
	var due []func()
	if w.liveAt <= w.now {
		due = append(due, w.startLiveness)
	}
	if w.nextFault <= w.now {
		due = append(due, w.fault)
	}
	if w.timerDue() <= w.now {
		due = append(due, w.runTimers)
	}
	for _, pw := range w.srv.pending {
		if pw.at <= w.now {
			due = append(due, w.srv.applyPending)
			break
		}
	}
	for _, p := range w.procs {
		if p.due() <= w.now {
			due = append(due, func() {
				if p.due() <= w.now {
					w.step(p)
				}
			})
		}
	}
	w.sched.Shuffle(len(due), func(i, j int) { due[i], due[j] = due[j], due[i] })
	for _, f := range due {
		if w.err != nil {
			return
		}
		f()
	}
}

// noteReset declares a reset when every process and the Lease are gone:
// later tokens need not be above earlier ones.
func (w *simWorld) noteReset() {
	if len(w.alive()) == 0 && w.srv.stored(leaseName) == nil && len(w.srv.pending) == 0 && w.chk.maxServed > 0 {
		w.chk.reset()
		w.tracef(nil, "reset", "every process and the Lease are gone")
	}
}

// tracef appends one fixed-column line: global time, process, event,
// phase, token, maxSeen, clock offset | stored rv holder/transitions, detail.
func (w *simWorld) tracef(p *simProc, event, format string, args ...any) {
	b := w.line[:0]
	b = fmt.Appendf(b, "%9.3f ", w.now.Seconds())
	if p != nil {
		s := p.e.Status()
		phase := p.e.st.phase()
		if p.dead {
			phase = "dead"
		} else if p.isPaused() {
			phase = "paused"
		}
		b = fmt.Appendf(b, "%-5s %-11s %-9s tok=%-3d max=%-3d off=%+8.3f", p.name, event, phase, s.Token, p.e.st.maxSeen,
			(p.clk.Now().Sub(simEpoch) - w.now).Seconds())
	} else {
		b = fmt.Appendf(b, "%-5s %-11s %-9s %-7s %-7s %13s", "-", event, "", "", "", "")
	}
	if l := w.srv.stored(leaseName); l != nil {
		h := holderOf(l)
		if h == "" {
			h = "-"
		}
		b = fmt.Appendf(b, " | rv=%-4s %s/%d ", l.ResourceVersion, h, transitionsOf(l))
	} else {
		b = append(b, " | absent   "...)
	}
	b = fmt.Appendf(b, format, args...)
	b = append(b, '\n')
	w.line = b
	w.trace.add(b)
}
