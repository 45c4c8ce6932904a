package shards

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Confirmation (rule 1). A shard Lease is not renewed, so nothing tells its
// holder, in bounded time, that someone deleted it or edited it by hand:
// its watch may lag without bound. So a holder serves a shard's token only
// for a lease duration (less the margin) after the send of its last read
// or write that found the Lease as it knows it. One list of the set's
// shard Leases every retry period confirms them all (a read: it writes
// nothing). Whoever recreates a deleted shard, or takes one put back or
// edited by hand, waits a lease duration from when it saw that, which is
// after the deletion or edit, so after the holder's last confirmation.

// confirmedUntil is how long sh may be served on its confirmation.
func (s *Set) confirmedUntil(sh *shard) time.Time {
	if sh.confirmed.IsZero() {
		return time.Time{}
	}
	return sh.confirmed.Add(s.cfg.LeaseDuration - s.cfg.ClockSkewMargin)
}

// confirm lists the set's shard Leases when due (every retry period while
// this member holds shards, at once after a shard was moved to it) and
// confirms each one it holds that the list shows unchanged.
func (s *Set) confirm(ctx context.Context, v *view) time.Time {
	mine := false
	for i := range s.shards {
		if s.named(&s.shards[i], v.self) {
			mine = true
			break
		}
	}
	if !mine || v.now.Before(s.confirmAt) {
		if mine {
			return s.confirmAt
		}
		return time.Time{}
	}
	sent := s.clock.Now()
	s.confirmAt = sent.Add(s.cfg.RetryPeriod)
	list, err := s.leases.List(ctx, metav1.ListOptions{LabelSelector: SetLabel + "=" + s.cfg.Name + "," + RoleLabel + "=" + RoleShard})
	if err != nil {
		s.log.Info("listing the shard Leases to confirm them failed", "err", err)
		return s.confirmAt
	}
	now := s.clock.Now()
	found := make([]bool, len(s.shards))
	for k := range list.Items {
		l := &list.Items[k]
		i, ok := shardIndex(s.cfg.Name, s.cfg.Shards, l)
		if !ok {
			continue
		}
		found[i] = true
		sh := &s.shards[i]
		s.observe(l, false, false, now)
		if sh.obs != nil && sh.obs.ResourceVersion == l.ResourceVersion && s.named(sh, v.self) {
			sh.confirmed = sent
		}
	}
	for i := range s.shards {
		if sh := &s.shards[i]; !found[i] && sh.obs != nil {
			// Gone, its final state unknown.
			s.observe(sh.obs, true, true, now)
		}
	}
	return s.confirmAt
}
