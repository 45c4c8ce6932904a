package main

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// The shards section's measured phases: the steady-state window, a member joining, a member leaving.

// window measures the steady state.
func (s *shardsRun) window(ctx context.Context, cw *clusterWatch, apiPid, etcdPid int, baseWatches float64) error {
	e := s.env
	s.progress("steady-state window %v", s.so.window)
	before, err := e.scrapeLeases(ctx)
	if err != nil {
		return err
	}
	t0 := time.Now()
	apiM, etcdM := markCPU("kube-apiserver", apiPid), markCPU("etcd", etcdPid)
	var memM []cpuMark
	for _, c := range s.members() {
		memM = append(memM, markCPU(c.Identity(), c.Pid()))
	}
	// The open watches, every second of the window: the median (a watch
	// the apiserver closes and its client opens again shows for a moment).
	var counts []float64
	for end := t0.Add(s.so.window); time.Now().Before(end); {
		if err := settle(ctx, min(time.Second, time.Until(end)), 0); err != nil {
			return err
		}
		w, err := e.leaseWatches(ctx)
		if err != nil {
			return err
		}
		counts = append(counts, w)
	}
	s.r.WatchesSpread = NewSpread(counts)
	s.r.WatchesOpen = s.r.WatchesSpread.Median
	s.r.Watches = s.r.WatchesOpen - baseWatches
	s.r.APIServer, s.r.Etcd = apiM.usage(), etcdM.usage()
	s.r.Members = &procUsage{}
	for _, m := range memM {
		if u := m.usage(); u != nil {
			s.r.Members.CPUPerSecond += u.CPUPerSecond
			s.r.Members.RSSBytes += u.RSSBytes
			s.r.Members.PeakRSSBytes += u.PeakRSSBytes
		}
	}
	after, err := e.scrapeLeases(ctx)
	if err != nil {
		return err
	}
	t1 := time.Now()
	s.r.WindowSeconds = t1.Sub(t0).Seconds()
	other := cw.writes(t0, t1, func(ev leaseEvent) bool { return ev.namespace != s.ns })
	s.r.OtherWrites = other
	s.r.Requests, s.r.PerSecond = verbCounts{}, verbCounts{}
	for k, v := range after.sub(before).sub(other) {
		if v != 0 {
			s.r.Requests[k] = v
			s.r.PerSecond[k] = v / s.r.WindowSeconds
		}
	}
	s.r.Writes = s.r.Requests["POST"] + s.r.Requests["PUT"] + s.r.Requests["PATCH"] + s.r.Requests["DELETE"]
	for _, n := range s.leases.moves(t0) {
		s.r.HandsChanged += n
	}
	_, s.r.ServedAtEnd, _ = s.served.counts()
	s.progress("%s req/s (%s), %.1f writes per retry period; apiserver %s; %.0f member watches; %d shard moves in the window",
		fmtNum(s.r.PerSecond.total()), s.r.PerSecond, s.r.Writes/(s.r.WindowSeconds/s.t.RetryPeriod.Seconds()), fmtUsage(s.r.APIServer), s.r.Watches, s.r.HandsChanged)
	return nil
}

// join starts one more member and times the set's way to a fair share.
func (s *shardsRun) join(ctx context.Context) (*ShardsJoin, error) {
	j := &ShardsJoin{Members: len(s.members()) + 1, FairLeaseMs: -1, FairServedMs: -1}
	s.progress("a member joins (%d -> %d)", j.Members-1, j.Members)
	t0 := time.Now()
	c, err := s.startMember(ctx)
	if err != nil {
		return j, err
	}
	from := t0
	j.JoinedFrom = "process start"
	if s.kind == sc {
		id := c.Identity()
		ok := s.waitUntil(ctx, s.so.joinWait, func() bool { _, ok := s.leases.memberSeen(id); return ok })
		if at, seen := s.leases.memberSeen(id); ok && seen {
			from, j.JoinedFrom, j.StartToJoinMs = at, "its session Lease seen", ms(at.Sub(t0))
		}
	}
	live := s.identities()
	var leaseAt, servedAt time.Time
	wait := s.so.joinWait
	if s.kind == cg {
		// client-go does not rebalance: 5 retry periods show it.
		wait = min(wait, 5*s.t.RetryPeriod)
	}
	j.WaitedMs = ms(wait)
	s.waitUntil(ctx, time.Until(from.Add(wait)), func() bool {
		cur, _ := s.leases.current()
		if leaseAt.IsZero() && fairShare(holdings(cur), live, s.so.shards) {
			leaseAt = time.Now()
		}
		counts, distinct, _ := s.served.counts()
		if servedAt.IsZero() && distinct == s.so.shards && fairShare(counts, live, s.so.shards) {
			servedAt = time.Now()
		}
		return !leaseAt.IsZero() && !servedAt.IsZero()
	})
	j.Serving, _, _ = s.served.counts()
	if !leaseAt.IsZero() {
		j.FairLeaseMs = ms(leaseAt.Sub(from))
	}
	if !servedAt.IsZero() {
		j.FairServedMs = ms(servedAt.Sub(from))
	}
	// Moves are counted until two retry periods after the fair share (or
	// after the wait): a shard moved twice would show by then.
	end := time.Now()
	if err := settle(ctx, 2*s.t.RetryPeriod, 0); err != nil {
		return j, err
	}
	for _, n := range s.leases.moves(t0) {
		if n > 0 {
			j.Moved++
		}
		if n > 1 {
			j.MovedTwice++
		}
		j.MaxMoves = max(j.MaxMoves, n)
	}
	cur, _ := s.leases.current()
	j.Holdings = holdings(cur)
	j.NewHolds = j.Holdings[c.Identity()]
	s.progress("fair share on the Leases after %s, served after %s (from %s; waited %v); %d shards moved, %d more than once; the new member holds %d",
		fmtFairMs(j.FairLeaseMs), fmtFairMs(j.FairServedMs), j.JoinedFrom, end.Sub(from).Round(time.Millisecond), j.Moved, j.MovedTwice, j.NewHolds)
	return j, nil
}

// leave stops the member holding the most shards (SIGKILL if kill, else
// SIGTERM) and times, per shard it held, until another member serves it.
func (s *shardsRun) leave(ctx context.Context, kill bool) (*ShardsPhase, error) {
	how, wait := "SIGTERM", 60*time.Second
	if kill {
		how, wait = "SIGKILL", s.t.LeaseDuration+60*time.Second
	}
	cur, _ := s.leases.current()
	own := holdings(cur)
	byHeld := s.members()
	sort.SliceStable(byHeld, func(a, b int) bool { return own[byHeld[a].Identity()] > own[byHeld[b].Identity()] })
	if len(byHeld) < 2 || own[byHeld[0].Identity()] == 0 {
		return nil, fmt.Errorf("%s: no member to stop holds a shard: %s", how, s.describe())
	}
	victim := byHeld[0]
	id := victim.Identity()
	type held struct {
		index int
		token int64
	}
	var shardsHeld []held
	for i, c := range cur {
		if c.holder == id {
			shardsHeld = append(shardsHeld, held{i, c.token})
		}
	}
	p := &ShardsPhase{Victim: id, Held: len(shardsHeld)}
	s.progress("%s to %s, which holds %d shards", how, id, p.Held)
	t0 := time.Now()
	var err error
	if kill {
		err = victim.Kill()
	} else {
		err = victim.Terminate()
	}
	if err != nil {
		return p, err
	}
	s.remove(victim)
	done := func() bool {
		for _, h := range shardsHeld {
			if _, ok := s.served.servedAt(h.index, id, h.token, t0); !ok {
				return false
			}
		}
		return true
	}
	s.waitUntil(ctx, wait, done)
	var lat, leaseLat []time.Duration
	for _, h := range shardsHeld {
		if at, ok := s.served.servedAt(h.index, id, h.token, t0); ok {
			lat = append(lat, at.Sub(t0))
		}
		if at, ok := s.leases.takenAt(h.index, id, h.token, t0); ok {
			leaseLat = append(leaseLat, at.Sub(t0))
		}
	}
	p.Served, p.Latency, p.LeaseLatency = len(lat), NewDist(lat, true), NewDist(leaseLat, false)
	if _, err := victim.Wait(60 * time.Second); err != nil {
		victim.Stop(time.Second)
	}
	s.forget(victim)
	s.progress("%s: %d of %d shards served by another member: p50 %s, p99 %s (the Leases: p99 %s)", how, p.Served, p.Held,
		fmtMs(p.Latency.P50), fmtMs(p.Latency.P99), fmtMs(p.LeaseLatency.P99))
	if p.Served < p.Held {
		// Shown in the table (and failing the goal), not an error: the
		// next phase still runs.
		s.progress("%s: %d of %d shards of %s not served by another member within %v: %s", how, p.Held-p.Served, p.Held, id, wait, s.describe())
	}
	return p, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fmtFairMs(v float64) string {
	if v < 0 {
		return "never"
	}
	return fmtMs(v)
}
