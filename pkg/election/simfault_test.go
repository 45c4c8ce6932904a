package election

// The simulator's faults, adversary and phases. Each fault kind is on or
// off per seed (swarm testing) with its own weight; the event kinds fire
// at random instants (the faults stream picks the kind and the target),
// the others shape every call or event (watch-delay, lost-answer,
// read-error, drift).

import (
	"context"
	"math"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type simFault int

const (
	fWatchDelay simFault = iota
	fWatchLag
	fWatchDrop
	fLostAnswer
	fReadError
	fPause
	fDrift
	fCrash
	fTwin
	fSigterm
	fRelease
	fWithdraw
	fAdvDelete
	fAdvRecreate
	fAdvClearHolder
	fAdvSetHolder
	fAdvLower
	fAdvRaise
	fAdvDuration
	fAdvContenders
	fAdvBackup
	numSimFaults
)

var simFaultNames = [numSimFaults]string{
	"watch-delay", "watch-lag", "watch-drop", "lost-answer", "read-error", "pause", "drift",
	"crash", "twin", "sigterm", "release", "withdraw",
	"adv-delete", "adv-recreate", "adv-clear-holder", "adv-set-holder", "adv-lower", "adv-raise",
	"adv-duration", "adv-contenders", "adv-backup",
}

func (f simFault) String() string { return simFaultNames[f] }

// perCall: the kinds that shape calls and events instead of firing.
func (f simFault) perCall() bool {
	return f == fWatchDelay || f == fLostAnswer || f == fReadError || f == fDrift
}

// faultOn: kind f is enabled and the safety phase runs (the liveness
// phase heals every fault).
func (w *simWorld) faultOn(f simFault) bool { return w.enabled[f] && !w.live }

type simTimer struct {
	at    time.Duration
	kind  string // "restart", "healthy"
	id    string
	p     *simProc
	lease *coordinationv1.Lease // restore: the version to put back
}

func (w *simWorld) timerDue() time.Duration {
	d := simNever
	for _, t := range w.timers {
		d = min(d, t.at)
	}
	return d
}

func (w *simWorld) runTimers() {
	var due []simTimer
	keep := w.timers[:0]
	for _, t := range w.timers {
		if t.at <= w.now {
			due = append(due, t)
		} else {
			keep = append(keep, t)
		}
	}
	w.timers = keep
	for _, t := range due {
		switch t.kind {
		case "restart":
			if len(w.alive()) < 7 {
				w.start(t.id)
			}
		case "restore":
			w.srv.commit(leaseName, t.lease, simAdversary, "backup", true)
			w.tracef(nil, "restored", "rv %s", t.lease.ResourceVersion)
			if transitionsOf(t.lease) < w.chk.maxServed {
				// Tokens issued after the backup are forgotten by the
				// API server: the operator reset the count.
				w.chk.reset()
				w.tracef(nil, "reset", "the backup's count is below the highest token served")
			}
		case "healthy":
			if !t.p.dead && !t.p.isPaused() {
				_ = t.p.e.setCandidate(context.Background(), true, "app healthy")
				w.tracef(t.p, "healthy", "")
				t.p.wake = w.now
			}
		}
	}
}

// pick draws one of ps (nil: none).
func (w *simWorld) pick(ps []*simProc) *simProc {
	if len(ps) == 0 {
		return nil
	}
	return ps[w.flt.IntN(len(ps))]
}

func (w *simWorld) running() []*simProc {
	var out []*simProc
	for _, p := range w.alive() {
		if !p.isPaused() {
			out = append(out, p)
		}
	}
	return out
}

// leaderFirst draws the leading process with probability 3/4, if any.
func (w *simWorld) leaderFirst(ps []*simProc) *simProc {
	if w.flt.IntN(4) > 0 {
		for _, p := range ps {
			if p.e.st.term != nil {
				return p
			}
		}
	}
	return w.pick(ps)
}

// knower is a running process other than except that has seen the
// highest token served (nil: none), so a count lowered or deleted now is
// one the election must repair.
func (w *simWorld) knower(except *simProc) *simProc {
	for _, p := range w.running() {
		if p != except && !p.broken && p.e.st.maxSeen >= w.chk.maxServed {
			return p
		}
	}
	return nil
}

func (w *simWorld) knows(except *simProc) bool { return w.knower(except) != nil }

// forget: the adversary lowers or removes the stored count. Allowed only
// while a running process knows the highest token, and that process is
// then kept running (no pause, crash or exit) for the repair window: the
// election promises tokens never go backwards while a candidate that saw
// the count runs, not when every such candidate is stopped.
func (w *simWorld) forget() bool {
	k := w.knower(nil)
	if k == nil || w.now < w.outage {
		return false
	}
	c := w.maxCfg()
	w.guard, w.guardUntil = k, w.now+max(w.longest, c.ld)+c.rd+c.rp
	return true
}

// guarded: p must keep running now.
func (w *simWorld) guarded(p *simProc) bool { return p == w.guard && w.now < w.guardUntil }

// caughtUp: every live watch has delivered every committed version. The
// adversary deletes the Lease only then: a version that a process's watch
// has not brought yet, deleted, is a term nobody can know about (a
// newcomer whose wait has ended creates the Lease while its creator still
// serves), a limit of any watch-based election (docs/simulation.md).
func (w *simWorld) caughtUp() bool {
	for _, p := range w.alive() {
		if !p.broken && len(p.queue) > 0 {
			return false
		}
	}
	return true
}

// mayExit: p may crash or exit without the highest count being forgotten
// (else tokens could go backwards with no bug): someone else or the Lease
// still has it, or nothing is left at all (a reset).
func (w *simWorld) mayExit(p *simProc) bool {
	if l := w.srv.stored(leaseName); l != nil && transitionsOf(l) >= w.chk.maxServed {
		return true
	}
	if w.knows(p) {
		return true
	}
	return len(w.alive()) == 1 && w.srv.stored(leaseName) == nil
}

func (w *simWorld) exit(p *simProc, how string) {
	p.dead = true
	w.tracef(p, how, "")
	id := p.id
	if w.flt.IntN(3) == 0 {
		w.ids++
		id = string(rune('a' + w.ids - 1))
	}
	w.timers = append(w.timers, simTimer{at: w.now + time.Duration(w.flt.Float64()*2*float64(w.cfgs[0].ld)), kind: "restart", id: id})
}

// fault fires one event fault drawn by weight, then draws the next instant.
func (w *simWorld) fault() {
	w.nextFault = w.now + time.Duration(w.flt.ExpFloat64()*float64(w.faultEvery))
	total := 0.0
	for f := range numSimFaults {
		if w.enabled[f] && !f.perCall() {
			total += w.weight[f]
		}
	}
	if total == 0 {
		return
	}
	x := w.flt.Float64() * total
	f := simFault(0)
	for f = range numSimFaults {
		if w.enabled[f] && !f.perCall() {
			if x -= w.weight[f]; x < 0 {
				break
			}
		}
	}
	ctx := context.Background()
	ld := w.cfgs[0].ld
	scale := func(lo, hi float64) time.Duration { return time.Duration((lo + (hi-lo)*w.flt.Float64()) * float64(ld)) }
	switch f {
	case fWatchLag:
		if p := w.pick(w.alive()); p != nil {
			p.lagUntil, p.lagExtra = w.now+scale(0.5, 2), scale(0.1, 1)
			w.tracef(p, "watch-lag", "+%v until %.3f", p.lagExtra, p.lagUntil.Seconds())
		}
	case fWatchDrop:
		if p := w.pick(w.alive()); p != nil && !p.broken {
			w.dropWatch(p, "410")
		}
	case fPause:
		if p := w.leaderFirst(w.running()); p != nil && !w.guarded(p) {
			p.paused = w.now + scale(0.1, 3)
			w.tracef(p, "pause", "until %.3f", p.paused.Seconds())
		}
	case fCrash:
		if p := w.leaderFirst(w.alive()); p != nil && w.mayExit(p) && !w.guarded(p) {
			w.exit(p, "crash")
		}
	case fTwin:
		if p := w.pick(w.alive()); p != nil && len(w.alive()) < 9 {
			w.start(p.id)
		}
	case fSigterm:
		if p := w.leaderFirst(w.running()); p != nil && w.mayExit(p) && !w.guarded(p) {
			if p.e.cfg.ShutdownHandoff == HandoffImmediate {
				w.chk.handBack(p.name, w.now) // the platform stopped the app first
			}
			p.calls = p.calls[:0]
			err := p.e.shutdownRelease(ctx)
			p.e.publish()
			w.tracef(p, "sigterm", "%v %v", p.calls, err)
			w.exit(p, "exit")
		}
	case fRelease:
		if p := w.leaderFirst(w.running()); p != nil {
			d := time.Duration(0)
			if w.flt.IntN(2) == 0 {
				d = scale(0.5, 3)
			}
			w.chk.handBack(p.name, w.now) // the app gave the token back
			p.calls = p.calls[:0]
			err := p.e.releaseFor(ctx, d, "released on request")
			w.tracef(p, "release", "for %v %v %v", d, p.calls, err)
			p.wake = w.now
		}
	case fWithdraw:
		if p := w.leaderFirst(w.running()); p != nil && p.e.st.withdrawn == "" {
			p.calls = p.calls[:0]
			err := p.e.setCandidate(ctx, false, "app unhealthy")
			w.tracef(p, "withdraw", "%v %v", p.calls, err)
			p.wake = w.now
			w.timers = append(w.timers, simTimer{at: w.now + scale(0.5, 4), kind: "healthy", p: p})
		}
	default:
		w.adversary(f)
	}
}

// adversary changes the stored Lease as a person or a tool would.
func (w *simWorld) adversary(f simFault) {
	s := w.srv
	if w.now < w.outage {
		return // the API server is down
	}
	cur := s.stored(leaseName)
	edit := func(change func(l *coordinationv1.Lease)) {
		if cur == nil {
			return
		}
		l := cur.DeepCopy()
		change(l)
		if transitionsOf(l) < transitionsOf(cur) && transitionsOf(l) < w.chk.maxServed && !w.forget() {
			return // nobody left who could repair it: not a bug to find
		}
		s.commit(leaseName, l, simAdversary, "update", false)
		w.tracef(nil, f.String(), "")
	}
	names := func() string {
		if w.adv.IntN(3) == 0 {
			return "stranger"
		}
		return string(rune('a' + w.adv.IntN(max(w.ids, 1))))
	}
	switch f {
	case fAdvDelete:
		if cur != nil && w.caughtUp() && w.forget() {
			s.commit(leaseName, nil, simAdversary, "delete", false)
			w.tracef(nil, f.String(), "")
		}
	case fAdvRecreate:
		tr := int32(0)
		if cur != nil {
			tr = int32(transitionsOf(cur))
		}
		if w.adv.IntN(2) == 0 {
			tr = int32(min(w.adv.Int64N(int64(tr)+3), math.MaxInt32))
		}
		if !w.caughtUp() || !w.forget() {
			return
		}
		if cur != nil {
			s.commit(leaseName, nil, simAdversary, "delete", false)
		}
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leaseName, Namespace: ns},
			Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: leaseSeconds(w.cfgs[0].ld), LeaseTransitions: ptr(tr)}}
		if w.adv.IntN(2) == 0 {
			l.Spec.HolderIdentity = ptr(names())
			l.Spec.RenewTime = microTime(simEpoch.Add(w.now))
		}
		_, _ = s.create(nil, l, simAdversary)
		w.tracef(nil, f.String(), "")
	case fAdvClearHolder:
		edit(func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = nil })
	case fAdvSetHolder:
		edit(func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr(names()) })
	case fAdvLower:
		if t := transitionsOf(cur); t > 0 {
			edit(func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr(int32(w.adv.Int64N(t))) })
		}
	case fAdvRaise:
		if w.opts.maxint && w.adv.IntN(3) == 0 {
			// Scenario N5: one write near the top of int32 exhausts the count.
			edit(func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr(int32(math.MaxInt32 - w.adv.IntN(2))) })
			break
		}
		edit(func(l *coordinationv1.Lease) {
			l.Spec.LeaseTransitions = ptr(int32(min(transitionsOf(l)+1+w.adv.Int64N(3), math.MaxInt32)))
		})
	case fAdvDuration:
		secs := []int32{1, 2, int32(w.cfgs[0].ld / time.Second), int32(2 * w.cfgs[0].ld / time.Second), int32(4 * w.cfgs[0].ld / time.Second)}
		edit(func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr(secs[w.adv.IntN(len(secs))]) })
	case fAdvContenders:
		vals := []string{"1", "3", "100", "1024", "1e9", "garbage", "-5", ""}
		edit(func(l *coordinationv1.Lease) {
			if v := vals[w.adv.IntN(len(vals))]; v != "" {
				setContenders(l, 0)
				l.Annotations[ContendersAnnotation] = v
			} else {
				delete(l.Annotations, ContendersAnnotation)
			}
		})
	case fAdvBackup:
		w.restoreBackup()
	}
	for _, l := range s.log {
		w.longest = max(w.longest, durationOf(l.lease))
	}
}

// restoreBackup restores etcd from a backup the way it is done: the API
// server is down (every call fails, every watch ends) for longer than any
// lease duration, then comes back with the Lease at an older committed
// version and its older resourceVersion (new writes still get higher ones,
// as with etcd's restore --bump-revision); every watch relists.
func (w *simWorld) restoreBackup() {
	s := w.srv
	var versions []simCommit
	for i := max(0, len(s.log)-30); i < len(s.log); i++ {
		if s.log[i].lease != nil {
			versions = append(versions, s.log[i])
		}
	}
	if len(versions) == 0 || w.now < w.outage || w.now < w.guardUntil {
		// Not during a repair window either: the knower of a lowered
		// count must reach the API server to write it back.
		return
	}
	v := versions[w.adv.IntN(len(versions))]
	c := w.maxCfg()
	w.outage = w.now + max(w.longest, c.ld) + c.rd + time.Duration(w.adv.Int64N(int64(c.ld)))
	s.pending = nil
	w.tracef(nil, "adv-backup", "API server down until %.3f, then back to rv %d", w.outage.Seconds(), v.rv)
	for _, p := range w.alive() {
		if !p.broken {
			w.dropWatch(p, "outage")
		}
	}
	w.timers = append(w.timers, simTimer{at: w.outage, kind: "restore", lease: v.lease})
}
