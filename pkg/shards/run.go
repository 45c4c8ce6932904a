package shards

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
)

// Run takes part in the set until ctx is done, then hands every shard it
// holds to the other members, ends its session and deletes its session
// Lease, within the renew deadline. Run may be called once.
func (s *Set) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("shards: Run called twice")
	}
	s.alive.Store(true)
	defer s.alive.Store(false)

	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatch()
	r := cache.NewReflectorWithOptions(s.listWatch(), &coordinationv1.Lease{},
		&setStore{s: s, session: s.session.WatchStore()}, cache.ReflectorOptions{Name: "shard set " + s.cfg.Name, TypeDescription: "*v1.Lease"})
	go r.RunWithContext(watchCtx)

	sessCtx, stopSession := context.WithCancel(context.WithoutCancel(ctx))
	sessDone := make(chan error, 1)
	go func() { sessDone <- s.session.Run(sessCtx) }()

	timer := s.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for ctx.Err() == nil {
		wake := s.step(ctx)
		if !timer.Stop() {
			select {
			case <-timer.C():
			default:
			}
		}
		if !wake.IsZero() {
			timer.Reset(max(wake.Sub(s.clock.Now()), 0))
		}
		select {
		case <-ctx.Done():
		case <-s.notify:
			s.drainInbox()
		case <-s.session.Changed():
		case c := <-s.control:
			cctx, cancel := context.WithTimeout(ctx, s.cfg.RenewDeadline)
			c.reply <- c.do(cctx)
			cancel()
		case <-timer.C():
		}
	}
	// Shutdown: hand everything over, then end the session.
	// Hundreds of shards are written at once on a loaded API server: the
	// renew deadline bounds it (the pod's grace period is longer).
	leaveCtx, cancel := context.WithTimeout(context.Background(), max(election.ShutdownTimeout, s.cfg.RenewDeadline))
	defer cancel()
	s.drainInbox()
	s.leave(leaveCtx, "shutting down")
	stopSession()
	err := <-sessDone
	s.deleteSession(leaveCtx)
	s.publish(s.look(s.clock.Now(), s.session.Status()))
	return err
}

// leave hands every shard this member holds to the others (or frees it
// when it is alone), with MoveRecord.Leaving.
func (s *Set) leave(ctx context.Context, why string) {
	s.leaving = why
	for range 3 {
		s.step(ctx)
		if !s.holdsAny() || ctx.Err() != nil {
			return
		}
	}
}

func (s *Set) holdsAny() bool {
	st := s.session.Status()
	self := SessionRef{Lease: s.sessionName, UID: st.LeaseUID, Term: st.LastToken}
	for i := range s.shards {
		if ref, ok := sessionOf(s.shards[i].obs); ok && ref == self && holderOf(s.shards[i].obs) == s.cfg.Identity {
			return true
		}
	}
	return false
}

// deleteSession removes our session Lease once our candidate released it.
func (s *Set) deleteSession(ctx context.Context) {
	m := s.members[s.sessionName]
	if m == nil || m.obs == nil {
		return
	}
	uid := m.obs.UID
	err := s.leases.Delete(ctx, s.sessionName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		s.log.Info("could not delete the session Lease; another member will", "lease", s.sessionName, "err", err)
	}
}

func (s *Set) listWatch() cache.ListerWatcher {
	selector := SetLabel + "=" + s.cfg.Name
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.LabelSelector = selector
			l, err := s.leases.List(ctx, opts)
			if err != nil {
				s.log.Warn("listing the shard set's Leases failed", "err", err)
			}
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = selector
			w, err := s.leases.Watch(ctx, opts)
			if err != nil {
				s.log.Warn("watching the shard set's Leases failed", "err", err)
			}
			return w, err
		},
	}
	return cache.ToListWatcherWithWatchListSemantics(lw, s.cfg.Client)
}

// simStep is one deterministic pass for the simulator: the watch events
// given so far, the session's candidate, then the set (writes one by one).
func (s *Set) simStep(ctx context.Context) time.Time {
	s.serial = true
	s.drainInbox()
	wake := s.session.Step(ctx)
	return earliest(wake, s.step(ctx))
}

// step runs one pass: look, plan, write our part, publish. It returns when
// to look again (zero: on an event).
func (s *Set) step(ctx context.Context) time.Time {
	if !s.synced {
		return time.Time{}
	}
	now := s.clock.Now()
	st := s.session.Status()
	v := s.look(now, st)
	var wake time.Time
	if v.self != (SessionRef{}) && ctx.Err() == nil || s.leaving != "" {
		wake = s.act(ctx, &v)
		now = s.clock.Now()
		v = s.look(now, s.session.Status())
	}
	s.cleanup(ctx, &v)
	if ctx.Err() == nil {
		wake = earliest(wake, s.confirm(ctx, &v))
	}
	wake = earliest(wake, s.publish(v))
	if st.IsLeader {
		wake = earliest(wake, st.ValidUntil)
	}
	return wake
}

// cleanup deletes session Leases nobody needs any more: unwritten for three
// lease durations, and named by no shard. Only
// the first live member does it; the delete is preconditioned on the
// version it judged.
func (s *Set) cleanup(ctx context.Context, v *view) {
	if len(v.members) == 0 || v.members[0] != s.cfg.Identity || ctx.Err() != nil {
		return
	}
	named := map[string]bool{}
	for i := range s.shards {
		if ref, ok := sessionOf(s.shards[i].obs); ok {
			named[ref.Lease] = true
		}
	}
	d := s.cfg.LeaseDuration
	for _, name := range slices.Sorted(maps.Keys(s.members)) {
		m := s.members[name]
		if m.obs == nil || named[name] || name == s.sessionName || v.now.Before(m.deleteAfter) {
			continue
		}
		idle := v.now.Sub(m.obsTime)
		// A member whose term was ended takes its session back a lease
		// duration after it sees it free: only a session idle for three
		// is one nobody comes back to.
		if idle < 3*max(d, durationOf(m.obs)) {
			continue
		}
		uid, rv := m.obs.UID, m.obs.ResourceVersion
		err := s.leases.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
		if err == nil {
			s.log.Info("deleted the session Lease of a member that left", "lease", name, "holder", holderOf(m.obs))
		}
		m.deleteAfter = v.now.Add(d) // tried: not again before a lease duration
	}
}
