package shards

import (
	"context"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// send runs the writes, maxInFlight at a time, then applies their results
// in order.
func (s *Set) send(ctx context.Context, writes []*write) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxInFlight)
	if s.serial {
		sem = make(chan struct{}, 1)
	}
	for _, w := range writes {
		if w.lease == nil {
			continue
		}
		if s.serial {
			s.write(ctx, w)
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			s.write(ctx, w)
		}()
	}
	wg.Wait()
	now := s.clock.Now()
	for _, w := range writes {
		if w.lease != nil {
			s.applied(ctx, w, now)
		}
	}
}

func (s *Set) write(ctx context.Context, w *write) {
	w.sent = s.clock.Now()
	wctx, cancel := context.WithTimeout(ctx, s.cfg.RenewDeadline)
	defer cancel()
	if w.create {
		w.got, w.err = s.leases.Create(wctx, w.lease, metav1.CreateOptions{})
	} else {
		w.got, w.err = s.leases.Update(wctx, w.lease, metav1.UpdateOptions{})
	}
}

// applied records a write's outcome.
func (s *Set) applied(ctx context.Context, w *write, now time.Time) {
	if w.err == nil {
		s.observe(w.got, false, false, now)
		if w.shard >= 0 && s.shards[w.shard].obs == w.got {
			s.shards[w.shard].confirmed = w.sent // our write found it as we knew it
		}
		s.recordMove(w)
		return
	}
	s.metrics.apiErrors.Inc()
	if apierrors.IsConflict(w.err) || apierrors.IsAlreadyExists(w.err) || apierrors.IsNotFound(w.err) {
		// Someone wrote first: read what is there now.
		name := w.lease.Name
		got, err := s.leases.Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			s.observe(got, false, false, s.clock.Now())
			return
		case apierrors.IsNotFound(err):
			// Deleted, its final state unknown: as a relist finds it.
			s.observe(w.lease, true, true, s.clock.Now())
			return
		}
	}
	s.log.Info("shard set write failed; retrying after a retry period", "lease", w.lease.Name, "write", w.what, "err", w.err)
	if w.shard >= 0 {
		s.shards[w.shard].retryAt = now.Add(s.cfg.RetryPeriod)
	}
}

// recordMove counts and reports a move that landed.
func (s *Set) recordMove(w *write) {
	switch w.what {
	case "give", "free":
		s.metrics.moves.WithLabelValues("out", w.reason).Inc()
		s.event(w.got, corev1.EventTypeNormal, "%s moved shard (token %d) to %q: %s", s.cfg.Identity, transitionsOf(w.got), w.to, w.reason)
	case "take":
		s.metrics.moves.WithLabelValues("in", w.reason).Inc()
		s.event(w.got, corev1.EventTypeNormal, "%s took shard (token %d): %s", s.cfg.Identity, transitionsOf(w.got), w.reason)
	case "end":
		s.log.Info("ended an expired member's session", "lease", w.got.Name, "holder", holderOf(w.lease))
	}
}

func (s *Set) event(l *coordinationv1.Lease, eventType, format string, args ...any) {
	if s.cfg.Recorder != nil && l != nil {
		s.cfg.Recorder.Eventf(l, eventType, "ShardMoved", format, args...)
	}
}
