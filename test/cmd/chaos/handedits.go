package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// Two faults of issue 23 ("Safety, round 2"): a free Lease that its holder
// did not release. Followers must treat it as held until it expires on
// their clock, because its holder may still serve its token; half of the
// time that holder is frozen (SIGSTOP, its writer too) over the edit, as a
// holder with a stalled connection would be.
//
//   - hand-clear: a client Update sets holderIdentity to nil and changes
//     nothing else (kubectl edit).
//   - recreate-free: the Lease is deleted and created again, free, by
//     another client (every candidate stalled over the two writes, or one
//     restores it first): its spec without a holder (the same count), or, when
//     at least two other candidates that saw the Lease are healthy, a bare
//     manifest without leaseTransitions (the count is the candidates' to
//     remember).
//
// Both are checked by the sampler's invariants and by invariant 6: no
// process serves a higher token while another process's answer still
// claims validity (checkClaims).

// injectHandEdit starts a hand-clear or recreate-free fault in the
// background; it does nothing (counted as "KIND skipped") if nobody leads
// or the apiserver is down.
func (s *soak) injectHandEdit(ctx context.Context, kind string) {
	if s.apiDown.Load() {
		return
	}
	sl, c := s.leaderSlot(ctx)
	if sl == nil {
		s.count(kind + " skipped")
		return
	}
	bare := kind == "recreate-free" && s.healthy(sl) >= 2 && s.intn(2) == 0
	freeze := s.intn(2) == 0
	s.count(kind)
	s.onSlot(sl, func() {
		var thaw func()
		how := "running"
		if freeze {
			d := s.dur(s.o.timings.LeaseDuration/2, 2*s.o.timings.LeaseDuration)
			thaw = s.freeze(sl, c)
			how = fmt.Sprintf("frozen for %v", d.Round(time.Millisecond))
			defer func() {
				time.Sleep(d) // the freeze's length is the fault itself
				thaw()
			}()
		}
		ectx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var what string
		var err error
		if kind == "hand-clear" {
			what, err = s.handClear(ectx)
		} else {
			what, err = s.recreateFree(ectx, bare)
		}
		s.logf("fault: %s: %s (leader %s %s) (%v)", kind, what, c.Instance, how, errOr(err, "ok"))
	})
}

// freeze SIGSTOPs c and its writer (as the sigstop fault does) and returns
// the function that resumes both and sends the write the writer had in
// flight, if any.
func (s *soak) freeze(sl *slot, c *framework.Candidate) func() {
	sl.pause(c)
	sl.mu.Lock()
	// Was the writer busy writing with a token when the pod froze?
	inFlight := sl.lastInstance == c.Instance && time.Since(sl.lastTokenAt) < 200*time.Millisecond
	heldToken := sl.lastToken
	sl.mu.Unlock()
	return func() {
		sl.unpause(c)
		if inFlight {
			s.lateWrite(c.Instance, heldToken)
		}
	}
}

// handClear clears holderIdentity with an Update, retrying on conflicts
// with the holder's renewals.
func (s *soak) handClear(ctx context.Context) (string, error) {
	leases := s.cp.Client.CoordinationV1().Leases(s.ns)
	for attempt := 0; ; attempt++ {
		l, err := leases.Get(ctx, "chaos", metav1.GetOptions{})
		if err != nil {
			return "holderIdentity not cleared", err
		}
		holder, transitions := framework.LeaseHolder(l)
		l.Spec.HolderIdentity = nil
		if _, err = leases.Update(ctx, l, metav1.UpdateOptions{}); err == nil {
			return fmt.Sprintf("holderIdentity %q cleared by hand (leaseTransitions %d)", holder, transitions), nil
		}
		if !apierrors.IsConflict(err) || attempt == 5 {
			return "holderIdentity not cleared", err
		}
	}
}

// recreateFree deletes the Lease and creates it again without a holder:
// its spec otherwise, or (bare) only its lease duration.
func (s *soak) recreateFree(ctx context.Context, bare bool) (string, error) {
	leases := s.cp.Client.CoordinationV1().Leases(s.ns)
	old, err := leases.Get(ctx, "chaos", metav1.GetOptions{})
	if err != nil {
		return "not recreated", err
	}
	// The candidates restore a deleted Lease at once: they stall (SIGSTOP)
	// over the deletion and the creation, and their watches deliver both
	// when they wake.
	unstall := s.stallCandidates()
	defer unstall()
	if err := s.deleteLease(ctx, old); err != nil {
		return "not recreated", err
	}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "chaos", Namespace: s.ns}, Spec: *old.Spec.DeepCopy()}
	l.Spec.HolderIdentity = nil
	what := "with its count"
	if bare {
		l.Spec = coordinationv1.LeaseSpec{LeaseDurationSeconds: old.Spec.LeaseDurationSeconds}
		what = "bare (no leaseTransitions)"
	}
	created, err := leases.Create(ctx, l, metav1.CreateOptions{})
	unstall()
	if apierrors.IsAlreadyExists(err) {
		// A candidate restored it first: the deletion was the fault.
		return fmt.Sprintf("Lease deleted (holder %q, leaseTransitions %d); a candidate recreated it first", framework.HolderOf(old), framework.TransitionsOf(old)), nil
	}
	if err != nil {
		return "Lease deleted, not recreated", err
	}
	return fmt.Sprintf("Lease deleted (holder %q, leaseTransitions %d) and created free %s (leaseTransitions %d, UID %.8s)",
		framework.HolderOf(old), framework.TransitionsOf(old), what, framework.TransitionsOf(created), created.UID), nil
}

// stallCandidates SIGSTOPs every running candidate that no fault keeps
// paused and returns the function that resumes them (once).
func (s *soak) stallCandidates() func() {
	var stalled []*framework.Candidate
	for _, sl := range append(append([]*slot(nil), s.slots...), s.newcomerList()...) {
		sl.mu.Lock()
		paused := sl.paused
		sl.mu.Unlock()
		if c := s.g.Get(sl.id); !paused && c != nil && !c.Exited() && c.Pause() == nil {
			stalled = append(stalled, c)
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			for _, c := range stalled {
				_ = c.Resume()
			}
		})
	}
}

// checkClaims is invariant 6: no process served a higher token to a request
// sent while another process's answer still claimed validity (its send time
// + expiresInMs; the soak never calls POST /release).
func (s *soak) checkClaims(samples []framework.Sample) []string {
	return details(framework.CheckClaims(samples, nil, s.g.Sampler.Start))
}
