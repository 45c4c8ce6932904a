package election

// The simulator's liveness phase: the adversary stops, faults heal, a core
// of processes runs with steady clocks, and by a bound derived from the
// configured and observed waits exactly one core process must lead, named
// by the stored Lease.

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxCfg is the longest of each setting over the configs.
func (w *simWorld) maxCfg() simCfg {
	var m simCfg
	for _, c := range w.cfgs {
		m = simCfg{ld: max(m.ld, c.ld), rd: max(m.rd, c.rd), rp: max(m.rp, c.rp), skew: max(m.skew, c.skew)}
	}
	return m
}

// startLiveness ends the safety phase: the adversary stops, faults heal,
// the core (every running process but later twins) runs with steady
// clocks, and the end of the run is the liveness bound from now.
func (w *simWorld) startLiveness() {
	w.liveAt, w.live, w.nextFault = simNever, true, simNever
	ctx := context.Background()
	w.timers = nil // no restarts; a withdrawn process stays so with probability 1/4
	seen := map[string]bool{}
	for _, p := range w.alive() {
		if seen[p.id] {
			p.dead = true
			w.tracef(p, "crash", "twin, before the liveness phase")
			continue
		}
		seen[p.id] = true
		p.paused, p.lagUntil = 0, 0
		p.setRate(1)
		if p.e.st.withdrawn != "" && w.flt.IntN(4) > 0 {
			_ = p.e.setCandidate(ctx, true, "app healthy")
		}
		p.wake = w.now
	}
	if w.opts.maxint {
		w.operatorReset()
	}
	if len(w.alive()) == 0 {
		w.start(string(rune('a' + w.flt.IntN(max(w.ids, 1)))))
	}
	for _, l := range w.srv.log {
		w.longest = max(w.longest, durationOf(l.lease))
	}
	// The bound: in-flight writes land (renew deadline) and watches
	// relist (retry period); then a held Lease expires from its last
	// change, or a deletion's wait, or a release's validity runs out
	// (longest lease duration), a restored Lease's holder expires (once
	// more), back-off and the contention window (a retry period each),
	// and one more retry period for the winner's write; plus any open
	// ReleaseFor window.
	c := w.maxCfg()
	dmax := max(w.longest, c.ld)
	if w.outage > w.now {
		w.bound += w.outage - w.now // a backup's restore is still to come
	}
	w.bound += c.rd + 2*dmax + 4*c.rp + w.delayMax + time.Second
	for _, p := range w.alive() {
		if out := p.e.st.outUntil; out.After(p.clk.Now()) {
			w.bound = max(w.bound, p.toGlobal(out)-w.now+dmax+4*c.rp+time.Second)
		}
	}
	w.end = w.now + w.bound
	w.tracef(nil, "liveness", "core %d, bound %v (longest lease duration %v)", len(w.alive()), w.bound, dmax)
}

// checkLiveness: at the bound exactly one core process leads and the
// stored Lease names it, unless the core is correctly unavailable.
func (w *simWorld) checkLiveness() {
	if w.err != nil || !w.live {
		return
	}
	core, withdrawn := w.alive(), 0
	var leaders []*simProc
	for _, p := range core {
		if p.e.Status().NotCandidate != "" {
			withdrawn++
		}
		if p.e.Status().IsLeader {
			leaders = append(leaders, p)
		}
	}
	if withdrawn == len(core) && len(leaders) == 0 {
		w.unavailable = true
		w.tracef(nil, "unavailable", "every core process is withdrawn: correctly no leader")
		return
	}
	l := w.srv.stored(leaseName)
	if len(leaders) != 1 {
		w.fail(fmt.Errorf("liveness: %d core leaders %v after the bound %v", len(leaders), names(leaders), w.bound))
		return
	}
	p, s := leaders[0], leaders[0].e.Status()
	if l == nil || holderOf(l) != p.id || uidOf(l) != s.LeaseUID || transitionsOf(l) != s.Token {
		w.fail(fmt.Errorf("liveness: %s leads with token %d on %s, but the stored Lease is %s", p.name, s.Token, s.LeaseUID, leaseString(l)))
	}
}

func names(ps []*simProc) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.name)
	}
	return out
}

func leaseString(l *coordinationv1.Lease) string {
	if l == nil {
		return "absent"
	}
	return fmt.Sprintf("%s rv %s holder %q transitions %s", l.UID, l.ResourceVersion, holderOf(l), strconv.FormatInt(transitionsOf(l), 10))
}

// operatorReset is scenario N5's repair: when the count is exhausted (on
// the Lease or in a process's memory), the operator writes a low count with
// a new TransitionsResetAnnotation (creating the Lease if it is gone), and
// tokens start over.
func (w *simWorld) operatorReset() {
	l := w.srv.stored(leaseName)
	top := transitionsOf(l)
	for _, p := range w.alive() {
		top = max(top, p.e.st.maxSeen)
	}
	if top <= math.MaxInt32-100 {
		return
	}
	if l == nil {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leaseName, Namespace: ns},
			Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: leaseSeconds(w.cfgs[0].ld)}}
	}
	l = l.DeepCopy()
	l.Spec.LeaseTransitions = ptr(int32(w.adv.IntN(4)))
	setAnnotation(l, TransitionsResetAnnotation, fmt.Sprintf("sim-%d", w.seed))
	if l.UID == "" {
		_, _ = w.srv.create(nil, l, simAdversary)
	} else {
		w.srv.commit(leaseName, l, simAdversary, "update", false)
	}
	w.chk.reset()
	w.tracef(nil, "reset", "the operator's declared reset of the count")
}
