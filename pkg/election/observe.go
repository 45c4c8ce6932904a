package election

import (
	"fmt"
	"math"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
)

// This file turns what the loop learns (informer events, GETs, write
// answers) into state. Each function is called only by the loop.

// markSynced records that the initial list was handled. A candidate that
// found no Lease and never saw one cannot know whether one was just
// deleted, with its holder still serving a token: it waits one lease
// duration before it creates one.
func (e *Elector) markSynced() {
	s := &e.st
	if s.synced {
		return
	}
	s.synced = true
	if s.obs == nil && !s.everSeen && !e.cfg.OwnLease {
		s.notBefore = laterOf(s.notBefore, e.clock.Now().Add(e.cfg.LeaseDuration))
	}
	e.log.Debug("initial list of the lease complete", "found", s.obs != nil)
}

// observe records the Lease as it now is. authoritative: a GET or the
// answer to our own write, taken even when its resourceVersion looks older
// than what we hold (etcd restored from a backup); informer events that
// look older are ignored.
func (e *Elector) observe(l *coordinationv1.Lease, authoritative bool) {
	s := &e.st
	if !authoritative && older(l, s.obs) {
		return
	}
	now := e.clock.Now()
	if recordChanged(s.obs, l) {
		prev := s.obs
		s.obsTime = now
		s.draw = e.draw()
		if holderOf(l) != "" {
			// A release we saw was taken by another before our turn came:
			// the window was wide enough.
			if s.releaseSeen && holderOf(prev) == "" && !s.attempted && holderOf(l) != s.identity {
				s.lost = max(s.lost-1, 0)
			}
			s.attempted = false
		}
		s.releaseWait, s.releaseSeen = released(prev, l)
		s.handoffWait, s.handoffSeen = handedOff(prev, l)
		if prev != nil && uidOf(prev) != uidOf(l) {
			// Deleted and created again: its holder may still serve its
			// token, exactly as after a deletion we saw.
			e.waitOutDeleted(prev, now)
		}
		e.checkTwin(prev, l)
	}
	e.checkReset(l)
	e.warnLongLease(s.obs, l) // leaseduration.go
	s.contenders = contendersOf(l)
	s.obs = l
	s.everSeen = true
	s.restoreFrom = nil
	s.needRefresh = false
	s.maxSeen = max(s.maxSeen, transitionsOf(l))
	if s.ownDeletion && !ownRecord(s, l) {
		s.ownDeletion = false
	}
	if s.pendingToken > 0 && transitionsOf(l) >= s.pendingToken && !heldBy(l, s.identity, s.incarnation) {
		s.pendingToken = 0 // someone else's later write: ours did not land, or was replaced
	}
	if t := s.term; t != nil {
		switch {
		case uidOf(l) != t.uid:
			validTerm := e.clock.Now().Before(t.validUntil)
			e.loseTerm(LossRecreated)
			// Deleted and put back as our own record while our term was
			// valid (we learned it from a GET, before the deletion event):
			// nobody else can hold a valid token, take it back at once.
			s.ownDeletion = validTerm && ownRecord(s, l)
		case !heldBy(l, s.identity, s.incarnation):
			e.loseTerm(LossTaken)
		}
	}
}

// unseenAcquisitions is how far the count is raised after a deletion whose
// final state we did not see: more acquisitions than could happen in one
// watch gap. A token so issued skips values (tokens only need to grow)
// rather than risk one that a term we never saw already had.
const unseenAcquisitions = 1000

// observeDeleted records that the Lease is gone. last is its last state as
// the informer had it (nil when not known, e.g. a GET found nothing); the
// newer of it and our own view is what gets restored, and its count is
// seen: a later acquisition must issue a token above it. final: last is
// the deleted object itself (a watch's deletion event); otherwise (a
// relist, a GET or write that found nothing) acquisitions we never saw may
// have raised the count before the deletion, so the count seen is raised
// by unseenAcquisitions (unless the deleted Lease held our own valid term,
// which nobody could have taken).
func (e *Elector) observeDeleted(last *coordinationv1.Lease, final bool) {
	s := &e.st
	if last != nil && s.obs != nil && uidOf(last) != uidOf(s.obs) && older(last, s.obs) {
		// The deletion of an earlier Lease, arriving after we already saw
		// its successor (from a GET): only its count matters.
		s.maxSeen = max(s.maxSeen, transitionsOf(last))
		return
	}
	now := e.clock.Now()
	gone := newest(last, s.obs)
	if gone == nil {
		gone = s.restoreFrom // a second notice of a deletion already handled
	}
	s.maxSeen = max(s.maxSeen, transitionsOf(gone))
	s.needRefresh = false
	if s.obs != nil || last != nil {
		s.deletedAt = now
		s.obsTime = now
	}
	ownValidTerm := s.term != nil && now.Before(s.term.validUntil) &&
		uidOf(gone) == s.term.uid && heldBy(gone, s.identity, s.incarnation)
	if !final && !ownValidTerm && gone != nil && gone != s.restoreFrom {
		s.maxSeen = max(s.maxSeen, min(transitionsOf(gone)+unseenAcquisitions, math.MaxInt32-1))
	}
	if s.term != nil {
		e.loseTerm(LossDeleted)
	}
	s.obs = nil
	if ownValidTerm {
		// Nobody can have taken the Lease since our last renew: we may
		// recreate it at once, with a higher token. If we may not campaign
		// now (withdrawn, released for a while), we restore it instead
		// (decide), so its count outlives our absence.
		s.ownDeletion = true
		s.restoreFrom = gone
		return
	}
	s.ownDeletion = false
	s.restoreFrom = newest(s.restoreFrom, gone)
	e.waitOutDeleted(gone, now)
}

// waitOutDeleted: the Lease gone (deleted, or replaced by one with another
// UID) was seen to go at now. Its holder may still serve its token for up
// to its lease duration: no acquisition before then, and no token at or
// below its count.
func (e *Elector) waitOutDeleted(gone *coordinationv1.Lease, now time.Time) {
	s := &e.st
	s.maxSeen = max(s.maxSeen, transitionsOf(gone))
	s.deletedAt = now
	s.notBefore = laterOf(s.notBefore, now.Add(max(e.cfg.LeaseDuration, durationOf(gone))))
}

// startTerm begins a term on l, which our acquire, sent at sent, wrote.
func (e *Elector) startTerm(l *coordinationv1.Lease, sent time.Time) {
	s := &e.st
	s.term = &term{token: transitionsOf(l), uid: uidOf(l)}
	s.lastToken, s.lastTermUID = s.term.token, s.term.uid
	s.pendingToken = 0
	s.unreleased = false
	s.ownDeletion = false
	s.holdOff = time.Time{}
	e.renewed(sent)
	e.metrics.acquisitions.Inc()
	e.log.Info("became leader", "token", s.term.token, "leaseUID", s.term.uid)
	e.event(corev1.EventTypeNormal, "%s became leader with fencing token %d", e.cfg.Identity, s.term.token)
}

// renewed starts a new validity window from the instant the successful
// write was sent: other candidates saw the change no earlier than that.
func (e *Elector) renewed(sent time.Time) {
	t := e.st.term
	t.lastRenew = sent
	t.nextRenew = sent.Add(e.cfg.RetryPeriod)
	t.validUntil = sent.Add(e.cfg.LeaseDuration - e.cfg.ClockSkewMargin)
	e.st.retryAt = time.Time{}
}

// endTerm stops the token at once (published before anything else
// happens) and reports whether there was a term.
func (e *Elector) endTerm() (token int64, ok bool) {
	t := e.st.term
	if t == nil {
		return 0, false
	}
	e.st.term = nil
	e.st.promisedUntil = laterOf(e.st.promisedUntil, t.validUntil)
	e.publish()
	return t.token, true
}

// loseTerm ends our term involuntarily.
func (e *Elector) loseTerm(r LossReason) {
	token, ok := e.endTerm()
	if !ok {
		return
	}
	why := r.Describe(holderOf(e.st.obs))
	e.metrics.losses.WithLabelValues(string(r)).Inc()
	e.log.Warn("lost leadership", "token", token, "reason", why)
	e.event(corev1.EventTypeWarning, "%s lost leadership (token %d): %s", e.cfg.Identity, token, why)
}

// checkTwin reports a second process with our identity: after our initial
// list, a write on the same Lease that renews or releases a term of our
// identity under another incarnation. (An earlier process with our name,
// before a restart, wrote only before we listed.) Identities must be
// unique: the election stays safe (a term is only its own process's to
// renew or release), but the two processes contend for one name.
func (e *Elector) checkTwin(prev, l *coordinationv1.Lease) {
	s := &e.st
	if !s.synced || prev == nil || uidOf(prev) != uidOf(l) {
		return
	}
	var other string
	switch {
	case holderOf(l) == s.identity && !renewTimeOf(l).Equal(renewTimeOf(prev)):
		other = incarnationOf(l)
	case holderOf(l) == "" && holderOf(prev) == s.identity:
		other = releasedBy(l)
	}
	if other == "" || other == s.incarnation {
		return
	}
	first := s.collision == ""
	s.collision = fmt.Sprintf("another process with identity %q (incarnation %s) wrote the lease; this one is %s: every candidate needs its own identity", s.identity, other, s.incarnation)
	e.metrics.collisions.Inc()
	e.log.Error("identity collision", "otherIncarnation", other, "incarnation", s.incarnation)
	if first {
		e.event(corev1.EventTypeWarning, "%s: %s", e.cfg.Identity, s.collision)
	}
}

// checkReset applies an operator's declared reset of the count
// (TransitionsResetAnnotation changed): the Lease's count becomes the
// highest seen, so a lowered count is not raised back.
func (e *Elector) checkReset(l *coordinationv1.Lease) {
	s := &e.st
	v := annotation(l, TransitionsResetAnnotation)
	if v == s.resetSeen {
		return
	}
	first := !s.everSeen
	s.resetSeen = v
	if v == "" || first {
		return
	}
	e.log.Warn("leaseTransitions reset by an operator", "from", s.maxSeen, "to", transitionsOf(l), "reset", v)
	e.event(corev1.EventTypeWarning, "%s accepts the reset of leaseTransitions from %d to %d (%s=%s)", e.cfg.Identity, s.maxSeen, transitionsOf(l), TransitionsResetAnnotation, v)
	s.maxSeen = transitionsOf(l)
	s.retryAt = time.Time{}
	e.setCannotLead("")
}

// setCannotLead records why no token can be issued ("": it can again).
func (e *Elector) setCannotLead(why string) {
	s := &e.st
	if why == s.cannotLead {
		return
	}
	s.cannotLead = why
	if why == "" {
		e.log.Info("tokens can be issued again")
		return
	}
	e.log.Error("cannot lead", "reason", why)
	e.event(corev1.EventTypeWarning, "%s cannot lead: %s", e.cfg.Identity, why)
}
