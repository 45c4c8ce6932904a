package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// The two faults around a Lease deletion that the safety review of
// pkg/election pointed at, and the per-candidate proxies they need.
//
//   - handoff-delete: the leader is SIGTERMed and the Lease is deleted right
//     when its release lands (or a few milliseconds later, or right after a
//     follower's acquire lands), while the followers race to take it. Views
//     of the last Lease differ between candidates; nobody may issue a token
//     value already served (invariant 5) or a lower one (invariant 3).
//   - partition-delete: the leader is cut off from the apiserver (its proxy
//     blackholed, established connections stalled or reset), the Lease is
//     deleted, and a brand-new candidate that never saw the Lease starts at
//     once. The cut-off leader may keep serving its token until it expires
//     on its own clock; the newcomer must not create the Lease at a low
//     token, or at all while that token can still be valid (invariants 2, 3, 5).

// newSlot returns a slot with its own proxy and kubeconfig.
func (s *soak) newSlot(id string, newcomer bool) (*slot, error) {
	p, err := framework.StartTCPProxy(s.upstream)
	if err != nil {
		return nil, err
	}
	kc := filepath.Join(s.logDir, "kubeconfig-"+id)
	if err := framework.WriteProxiedKubeconfig(s.cp.Kubeconfig, kc, p.Addr()); err != nil {
		_ = p.Close()
		return nil, err
	}
	return &slot{id: id, kubeconfig: kc, proxy: p, newcomer: newcomer}, nil
}

// startSlot starts the slot's identity through its proxy.
func (s *soak) startSlot(ctx context.Context, sl *slot) (*framework.Candidate, error) {
	spec := s.g.Template
	spec.Identity = sl.id
	spec.Kubeconfig = sl.kubeconfig
	return s.g.StartSpec(ctx, spec)
}

func (s *soak) startWriter(sl *slot) {
	s.writers.Add(1)
	go func() { defer s.writers.Done(); s.writer(s.wctx, sl) }()
}

func (s *soak) newcomerList() []*slot {
	s.newcomerMu.Lock()
	defer s.newcomerMu.Unlock()
	return append([]*slot(nil), s.newcomers...)
}

func (s *soak) closeProxies() {
	for _, sl := range append(append([]*slot(nil), s.slots...), s.newcomerList()...) {
		if sl.proxy != nil {
			_ = sl.proxy.Close()
		}
	}
}

// healthy counts slots other than except that are up, not paused and have
// no fault in progress: candidates that saw the Lease and can act on it.
func (s *soak) healthy(except *slot) int {
	n := 0
	for _, sl := range s.slots {
		sl.mu.Lock()
		if sl != except && !sl.down && !sl.pending && !sl.paused {
			n++
		}
		sl.mu.Unlock()
	}
	return n
}

// leaderSlot returns the slot of the candidate serving a token now, if it
// has no fault in progress, with that candidate.
func (s *soak) leaderSlot(ctx context.Context) (*slot, *framework.Candidate) {
	for _, c := range s.g.Leaders(ctx) {
		for _, sl := range s.slots {
			if sl.id != c.Identity() {
				continue
			}
			sl.mu.Lock()
			free := !sl.down && !sl.pending && !sl.paused
			sl.mu.Unlock()
			if free {
				return sl, c
			}
		}
	}
	return nil, nil
}

// injectDeletion starts a handoff-delete or partition-delete fault in the
// background; it does nothing (counted as "KIND skipped") if nobody leads
// or too few other candidates are healthy (the contract holds while a
// candidate that saw the Lease keeps running, so at least two must be able
// to restore it), or another partition is in progress; nor while the
// apiserver is down.
func (s *soak) injectDeletion(ctx context.Context, kind string) {
	if s.apiDown.Load() {
		return
	}
	if kind == "partition-delete" && !s.partitioned.CompareAndSwap(false, true) {
		s.count(kind + " skipped")
		return // one at a time
	}
	release := func() {
		if kind == "partition-delete" {
			s.partitioned.Store(false)
		}
	}
	sl, c := s.leaderSlot(ctx)
	if sl == nil || s.healthy(sl) < 2 {
		s.count(kind + " skipped")
		release()
		return
	}
	s.count(kind)
	sl.mu.Lock()
	sl.pending = true
	if kind == "handoff-delete" {
		sl.down = true
	}
	sl.mu.Unlock()
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		defer release()
		defer func() { sl.mu.Lock(); sl.pending = false; sl.mu.Unlock() }()
		if kind == "handoff-delete" {
			s.handoffDelete(sl, c)
		} else {
			s.partitionDelete(sl, c)
		}
	}()
}

// watchLease opens a watch on the Lease from its current version.
func (s *soak) watchLease(ctx context.Context) (watch.Interface, *coordinationv1.Lease, error) {
	leases := s.cp.Client.CoordinationV1().Leases(s.ns)
	cur, err := leases.Get(ctx, "chaos", metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	w, err := leases.Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", "chaos").String(),
		ResourceVersion: cur.ResourceVersion,
	})
	return w, cur, err
}

// awaitLease reads w until a Lease event matching match (nil: none before
// timeout, a deletion, or the watch ending).
func awaitLease(w watch.Interface, timeout time.Duration, match func(*coordinationv1.Lease) bool) *coordinationv1.Lease {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			l, isLease := ev.Object.(*coordinationv1.Lease)
			if !isLease || ev.Type == watch.Error || ev.Type == watch.Deleted {
				return nil
			}
			if match(l) {
				return l
			}
		case <-timer.C:
			return nil
		}
	}
}

func (s *soak) deleteLease(ctx context.Context, uid *coordinationv1.Lease) error {
	opts := metav1.DeleteOptions{}
	if uid != nil {
		opts.Preconditions = &metav1.Preconditions{UID: &uid.UID}
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return s.cp.Client.CoordinationV1().Leases(s.ns).Delete(dctx, "chaos", opts)
}

// handoffDelete: SIGTERM the leader, delete the Lease as the followers race,
// restart the leader's identity later.
func (s *soak) handoffDelete(sl *slot, c *framework.Candidate) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defer func() {
		code, _ := c.Wait(5 * time.Second)
		d := s.dur(0, s.o.timings.LeaseDuration)
		s.logf("handoff-delete: %s exited %d, restart in %v", c.Instance, code, d.Round(time.Millisecond))
		time.Sleep(d) // the restart delay is part of the fault
		s.restart(sl)
	}()
	w, cur, err := s.watchLease(ctx)
	if err != nil {
		_ = c.Terminate()
		s.logf("fault: handoff-delete: SIGTERM %s; watching the Lease failed (%v), no deletion", c.Instance, err)
		return
	}
	defer w.Stop()
	onAcquire := s.intn(3) == 0
	delay := s.dur(0, 30*time.Millisecond)
	if onAcquire {
		delay = s.dur(0, 5*time.Millisecond)
	}
	_ = c.Terminate()
	released := awaitLease(w, 3*time.Second, func(l *coordinationv1.Lease) bool {
		return l.UID == cur.UID && framework.HolderOf(l) == ""
	})
	trigger := "the release"
	if released == nil {
		trigger = "SIGTERM (no release seen within 3s)"
	} else if onAcquire {
		trigger = "the release (no follower's acquire seen within 3s)"
		if awaitLease(w, 3*time.Second, func(l *coordinationv1.Lease) bool {
			return framework.HolderOf(l) != "" && framework.TransitionsOf(l) > framework.TransitionsOf(released)
		}) != nil {
			trigger = "a follower's acquire"
		}
	}
	time.Sleep(delay) // the moment of the deletion is the fault itself
	err = s.deleteLease(ctx, cur)
	s.logf("fault: handoff-delete: SIGTERM %s (token %d), Lease deleted %v after %s (%v)",
		c.Instance, framework.TransitionsOf(cur), delay.Round(100*time.Microsecond), trigger, errOr(err, "ok"))
}

// partitionDelete: cut the leader off, delete the Lease, start a newcomer at
// once; heal after a while; stop the newcomer later.
func (s *soak) partitionDelete(sl *slot, c *framework.Candidate) {
	ctx := context.Background()
	drop := s.intn(2) == 0
	hold := s.dur(s.o.timings.LeaseDuration/2, 2*s.o.timings.LeaseDuration)
	sl.proxy.Blackhole(drop)
	mode := map[bool]string{true: "connections reset", false: "connections stalled"}[drop]
	err := s.deleteLease(ctx, nil)
	s.newcomerMu.Lock()
	id := fmt.Sprintf("new-%d", len(s.newcomers))
	s.newcomerMu.Unlock()
	nc, nerr := s.newSlot(id, true)
	var started *framework.Candidate
	if nerr == nil {
		s.newcomerMu.Lock()
		s.newcomers = append(s.newcomers, nc)
		s.newcomerMu.Unlock()
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		started, nerr = s.startSlot(sctx, nc)
		cancel()
		s.startWriter(nc)
	}
	s.logf("fault: partition-delete: %s cut off from the apiserver (%s) for %v, Lease deleted (%v), newcomer %s started (%v)",
		c.Instance, mode, hold.Round(time.Millisecond), errOr(err, "ok"), id, errOr(nerr, "ok"))
	time.Sleep(hold) // the partition's length is the fault itself
	sl.proxy.Heal()
	s.logf("partition-delete: %s reconnected", c.Instance)
	if started == nil {
		return
	}
	// Let the newcomer take part for a while, then stop it for good (the
	// soak keeps --candidates regular candidates).
	time.Sleep(s.dur(s.o.timings.LeaseDuration, 3*s.o.timings.LeaseDuration))
	nc.mu.Lock()
	nc.retired = true
	nc.mu.Unlock()
	_ = started.Terminate()
	code, _ := started.Wait(5 * time.Second)
	s.logf("partition-delete: newcomer %s stopped (exit %d)", started.Instance, code)
}

func errOr(err error, ok string) string {
	if err != nil {
		return err.Error()
	}
	return ok
}
