package election

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// This file carries out decide's actions: each makes at most a few API
// calls, every write a compare-and-swap on the resourceVersion it read.

func (e *Elector) execute(ctx context.Context, a action) {
	switch a {
	case actRefresh:
		_ = e.refresh(ctx) // a failure sets refreshAt
	case actRestore:
		e.restore(ctx)
	case actRaise:
		e.raise(ctx)
	case actAcquire:
		e.acquire(ctx)
	case actRenew:
		e.renew(ctx)
	case actGiveUp:
		e.loseTerm(LossRenewDeadline)
	case actAccept:
		e.accept(ctx)
	case actAnnounce:
		e.announce(ctx)
	}
}

// acquire takes the Lease with a new token: one above every count seen.
// A leader whose Lease was raised above its token ends that term first.
func (e *Elector) acquire(ctx context.Context) {
	s := &e.st
	next := max(s.maxSeen, transitionsOf(s.obs)) + 1
	if next > math.MaxInt32 {
		// Stays until an operator's reset (checkReset), which also ends
		// this back-off.
		e.setCannotLead(fmt.Sprintf("leaseTransitions is %d, the largest fencing token a Lease can hold: no new token can be issued until an operator resets the count (README: Recovering an exhausted token)", next-1))
		s.retryAt = e.clock.Now().Add(e.cfg.LeaseDuration)
		return
	}
	raced, spread := contended(s), spreads(s, &e.cfg)
	if s.term != nil {
		e.loseTerm(LossSuperseded)
	}
	sent := e.clock.Now()
	var prev *coordinationv1.LeaseSpec
	if s.obs != nil {
		prev = &s.obs.Spec
	}
	spec := acquireSpec(prev, e.cfg.Identity, e.cfg.LeaseDuration, next, sent)
	reqCtx, cancel := context.WithTimeout(ctx, e.cfg.RenewDeadline)
	defer cancel()
	s.pendingToken = next
	var (
		got  *coordinationv1.Lease
		err  error
		verb = "update"
	)
	if s.obs == nil {
		verb = "create"
		l := e.newLease(spec)
		markTerm(l, s.incarnation)
		got, err = e.leases.Create(reqCtx, l, metav1.CreateOptions{})
	} else {
		l := s.obs.DeepCopy()
		l.Spec = spec
		markTerm(l, s.incarnation)
		pruneSuccessor(s, l)
		e.addLabels(l)
		if raced {
			s.attempted = true
		}
		if spread {
			// We win (if this lands) with our draw: pass on what it says
			// about how many contended.
			setContenders(l, nextContenders(contendersFor(s, &e.cfg), s.draw))
		}
		got, err = e.leases.Update(reqCtx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		if isAPIStatus(err) {
			s.pendingToken = 0 // the API server refused it: it did not land
		}
		if raced && apierrors.IsConflict(err) {
			s.lost = min(s.lost+1, contendMaxLost)
		}
		e.writeFailed(verb, "acquire", err)
		return
	}
	e.observe(got, true)
	s.lost = 0
	e.setCannotLead("")
	e.startTerm(got, sent)
}

// restore creates the deleted Lease again as it was last known. Many
// followers may race; the API server lets one create win.
func (e *Elector) restore(ctx context.Context) {
	s := &e.st
	old := s.restoreFrom
	s.restoreFrom = nil
	reqCtx, cancel := context.WithTimeout(ctx, e.cfg.RenewDeadline)
	defer cancel()
	l := e.newLease(restoreSpec(old.Spec, s.maxSeen, e.clock.Now()))
	restoredRecord(old, l)
	got, err := e.leases.Create(reqCtx, l, metav1.CreateOptions{})
	if err != nil {
		if !apierrors.IsAlreadyExists(err) {
			// Try again after a retry period (the deletion's notBefore
			// still holds): we may be the only one left who knows the
			// count, and a newcomer would start it again at 1.
			e.log.Warn("restoring the deleted lease failed", "err", err)
			e.metrics.apiError("create")
			s.restoreFrom = newest(s.restoreFrom, old)
			s.retryAt = e.clock.Now().Add(e.cfg.RetryPeriod)
			return
		}
		e.writeFailed("create", "restore", err)
		return
	}
	e.log.Info("restored the deleted lease", "holder", holderOf(got), "leaseTransitions", transitionsOf(got))
	e.observe(got, true)
}

// raise writes back the highest count this candidate has seen, keeping the
// holder, so that whoever acquires next issues a token above it.
func (e *Elector) raise(ctx context.Context) {
	s := &e.st
	l := s.obs.DeepCopy()
	l.Spec = raiseSpec(l.Spec, s.maxSeen)
	e.addLabels(l)
	reqCtx, cancel := context.WithTimeout(ctx, e.cfg.RenewDeadline)
	defer cancel()
	got, err := e.leases.Update(reqCtx, l, metav1.UpdateOptions{})
	if err != nil {
		e.writeFailed("update", "raise", err)
		return
	}
	e.log.Info("raised leaseTransitions to the highest count seen", "from", transitionsOf(s.obs), "to", transitionsOf(got))
	e.observe(got, true)
}

// renew extends our term. A conflict re-reads the Lease and, if it is
// still ours, tries once more at once.
func (e *Elector) renew(ctx context.Context) {
	s := &e.st
	for attempt := 0; attempt < 2 && s.term != nil; attempt++ {
		t := s.term
		sent := e.clock.Now()
		remaining := t.lastRenew.Add(e.cfg.RenewDeadline).Sub(sent)
		if remaining <= 0 {
			e.loseTerm(LossRenewDeadline)
			return
		}
		l := s.obs.DeepCopy()
		l.Spec = renewSpec(l.Spec, e.cfg.Identity, e.cfg.LeaseDuration, t.token, sent)
		markTerm(l, s.incarnation)
		e.addLabels(l)
		reqCtx, cancel := context.WithTimeout(ctx, remaining)
		got, err := e.leases.Update(reqCtx, l, metav1.UpdateOptions{})
		cancel()
		e.metrics.renewDuration.Observe(e.clock.Since(sent).Seconds())
		if err == nil {
			e.observe(got, true)
			if s.term == t {
				e.renewed(sent)
			}
			return
		}
		if !apierrors.IsConflict(err) {
			e.writeFailed("update", "renew", err)
			return
		}
		e.metrics.apiError("update")
		_ = e.refresh(ctx)
	}
	if s.term != nil {
		// Two conflicts in a row: back off instead of spinning on the Lease.
		s.retryAt = e.clock.Now().Add(e.cfg.RetryPeriod / 4)
	}
}

// refresh re-reads the Lease. Its answer is authoritative.
func (e *Elector) refresh(ctx context.Context) error {
	s := &e.st
	reqCtx, cancel := context.WithTimeout(ctx, e.cfg.RetryPeriod)
	defer cancel()
	l, err := e.leases.Get(reqCtx, e.cfg.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if s.obs != nil || !s.everSeen {
			e.observeDeleted(nil, false)
		}
		s.needRefresh = false
	case err != nil:
		e.metrics.apiError("get")
		e.log.Warn("reading the lease failed", "err", err)
		s.refreshAt = e.clock.Now().Add(e.cfg.RetryPeriod)
		return err
	default:
		e.observe(l, true)
	}
	return nil
}

func (e *Elector) writeFailed(verb, what string, err error) {
	s := &e.st
	e.metrics.apiError(verb)
	now := e.clock.Now()
	switch {
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err):
		// Someone else wrote first. The watch normally brings the new
		// state at once; if it does not within a retry period, GET it.
		e.log.Debug(what+" lost a race", "err", err)
		s.needRefresh = true
		s.refreshAt = now.Add(e.cfg.RetryPeriod)
	case apierrors.IsNotFound(err) && verb != "create":
		e.observeDeleted(nil, false)
		s.retryAt = now.Add(e.cfg.RetryPeriod)
	default:
		// Includes NotFound on create: the namespace does not exist.
		e.log.Warn(what+" failed", "err", err)
		s.retryAt = now.Add(e.cfg.RetryPeriod)
	}
}

// stepDown stops our token, then writes the Lease free so that a follower
// takes it on the watch event instead of waiting for expiry. It also frees
// a Lease that still records an ended term of ours: an earlier release
// that failed, or an acquire whose answer was lost. handedBack: the app
// gave the token back (or has exited), so followers may take the Lease at
// once; otherwise the release tells them to wait until the validity
// already handed out has run out.
func (e *Elector) stepDown(ctx context.Context, why string, handedBack bool) error {
	s := &e.st
	if _, ok := e.endTerm(); ok {
		s.holdOff = e.clock.Now().Add(e.cfg.LeaseDuration)
		s.unreleased = true
		e.metrics.releases.Inc()
		if e.cfg.BeforeRelease != nil {
			hookCtx, cancel := context.WithTimeout(ctx, BeforeReleaseTimeout)
			e.cfg.BeforeRelease(hookCtx)
			cancel()
		}
	}
	if s.pendingToken > 0 {
		// Only a GET tells whether that acquire landed.
		if err := e.refresh(ctx); err != nil {
			return fmt.Errorf("releasing lease %s: reading it: %w", e.cfg.LeaseKey(), err)
		}
		s.unreleased = s.unreleased || ours(s, s.obs)
	}
	if !s.unreleased {
		return nil
	}
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		l := s.obs
		if !ours(s, l) {
			s.unreleased, s.pendingToken = false, 0
			return nil // not ours any more: nothing to release
		}
		token := transitionsOf(l)
		now := e.clock.Now()
		var wait time.Duration
		if !handedBack {
			wait = max(s.promisedUntil.Sub(now), 0)
		}
		got, to, handed, herr := e.handOff(ctx, l, wait)
		err = herr
		if !handed {
			free := l.DeepCopy()
			free.Spec = releaseSpec(l.Spec, s.lastToken, now)
			markReleased(free, specTransitions(&free.Spec), s.incarnation, wait)
			e.addLabels(free)
			got, err = e.leases.Update(ctx, free, metav1.UpdateOptions{})
		}
		if err == nil {
			s.unreleased, s.pendingToken = false, 0
			e.observe(got, true)
			if handed {
				e.metrics.handoffsGiven.Inc()
				e.log.Info("handed leadership over", "token", token, "to", to, "successorToken", transitionsOf(got), "reason", why)
				e.event(corev1.EventTypeNormal, "%s handed leadership (token %d) to %s: %s", e.cfg.Identity, token, to, why)
				return nil
			}
			e.log.Info("released leadership", "token", token, "reason", why)
			e.event(corev1.EventTypeNormal, "%s released leadership (token %d): %s", e.cfg.Identity, token, why)
			return nil
		}
		e.metrics.apiError("update")
		if !apierrors.IsConflict(err) {
			break
		}
		_ = e.refresh(ctx)
	}
	e.log.Warn("releasing the lease failed; followers take over when it expires", "err", err)
	return fmt.Errorf("releasing lease %s: %w", e.cfg.LeaseKey(), err)
}

// newLease is the Lease this candidate creates: its spec and
// Config.LeaseLabels.
func (e *Elector) newLease(spec coordinationv1.LeaseSpec) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: e.cfg.Name, Namespace: e.cfg.Namespace},
		Spec:       spec,
	}
	e.addLabels(l)
	return l
}

// addLabels adds the Config.LeaseLabels that l lacks, before a write: a
// Lease created without them (by an older version, or another client)
// gets them with this candidate's next write. A key l already has keeps
// its value; nothing is removed.
func (e *Elector) addLabels(l *coordinationv1.Lease) {
	for k, v := range e.cfg.LeaseLabels {
		if _, ok := l.Labels[k]; ok {
			continue
		}
		if l.Labels == nil {
			l.Labels = make(map[string]string, len(e.cfg.LeaseLabels))
		}
		l.Labels[k] = v
	}
}

// event records a Kubernetes Event on the Lease (best effort, asynchronous).
func (e *Elector) event(eventType, format string, args ...any) {
	if e.cfg.Recorder == nil {
		return
	}
	ref := e.newLease(coordinationv1.LeaseSpec{})
	if e.st.obs != nil {
		ref.ObjectMeta = *e.st.obs.ObjectMeta.DeepCopy()
	}
	e.cfg.Recorder.Eventf(ref, eventType, "LeaderElection", format, args...)
}

// isAPIStatus: the API server answered (the request did not get lost).
func isAPIStatus(err error) bool {
	var st apierrors.APIStatus
	return errors.As(err, &st)
}
