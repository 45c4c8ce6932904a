package election

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
)

// LongLeaseFactor: a Lease whose spec.leaseDurationSeconds is more than
// this many times a candidate's own lease duration gets a warning from that
// candidate (a log line and a Warning Event on the Lease).
//
// A follower waits max(its own lease duration, the Lease's
// leaseDurationSeconds) without a change before it takes a held Lease
// (doc.go), so a hand-edited huge value (or a candidate started with a far
// longer --lease-duration) makes every follower wait that long once the
// holder is gone: up to decades. The wait itself is not capped: a holder
// computes its validity from its own configured duration, which the
// followers only know from this field; a cap would be safe only under a
// stronger assumption than the one the README states (candidates share a
// duration, or a newcomer's is the longest). The remedy is the operator's:
// the warning says what to fix.
const LongLeaseFactor = 10

// warnLongLease warns when l's leaseDurationSeconds is far above ours
// (LongLeaseFactor) and differs from prev's: once per new value seen.
func (e *Elector) warnLongLease(prev, l *coordinationv1.Lease) {
	d := durationOf(l)
	if d/LongLeaseFactor <= e.cfg.LeaseDuration || d == durationOf(prev) {
		return
	}
	holder := holderOf(l)
	e.log.Warn("the Lease's leaseDurationSeconds is far above this candidate's --lease-duration: once its holder stops renewing, "+
		"followers wait that long before taking over; fix the candidate that wrote it, or the hand edit",
		"leaseDurationSeconds", int64(d.Seconds()), "ownLeaseDuration", e.cfg.LeaseDuration, "holder", holder)
	e.event(corev1.EventTypeWarning, "%s: the Lease's leaseDurationSeconds %d is more than %d× this candidate's lease duration %v (holder %q): "+
		"followers wait that long after the holder's last renewal before taking over",
		e.cfg.Identity, int64(d.Seconds()), LongLeaseFactor, e.cfg.LeaseDuration, holder)
}
