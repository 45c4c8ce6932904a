package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// The shards section's table: ours beside client-go, each row judged by
// its goal (goals.go, issue 24) where it has one.

// perRetryPeriod is count over the window, per retry period.
func perRetryPeriod(count, windowSeconds float64, rp time.Duration) float64 {
	if windowSeconds <= 0 {
		return math.NaN()
	}
	return count / (windowSeconds / rp.Seconds())
}

// phaseMs returns a phase's p50 or p99 in ms; NaN when it was not measured,
// +Inf when a shard was never served by another member (a goal then fails).
func phaseMs(p *ShardsPhase, q func(Dist) float64) float64 {
	switch {
	case p == nil || p.Held == 0:
		return math.NaN()
	case p.Served < p.Held:
		return math.Inf(1)
	}
	return q(p.Latency)
}

func p50(d Dist) float64 { return d.P50 }
func p99(d Dist) float64 { return d.P99 }

func fmtPhase(p *ShardsPhase, q func(Dist) float64) string {
	switch {
	case p == nil || p.Held == 0:
		return "n/a"
	case p.Served < p.Held:
		return fmt.Sprintf("%d of %d shards never served", p.Held-p.Served, p.Held)
	}
	return fmtMs(q(p.Latency))
}

func fmtLeasePhase(p *ShardsPhase) string {
	if p == nil || p.LeaseLatency.N == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%s / %s (n=%d)", fmtMs(p.LeaseLatency.P50), fmtMs(p.LeaseLatency.P99), p.LeaseLatency.N)
}

func fmtHoldings(h map[string]int) string {
	if len(h) == 0 {
		return "none"
	}
	var ids []string
	for id := range h {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprintf("%s %d", id, h[id])
	}
	return strings.Join(parts, ", ")
}

func shardsRows(r *ShardsResult) []Row {
	o, b := r.Kinds[string(sc)], r.Kinds[string(cg)]
	if o == nil {
		o = &ShardsKindResult{}
	}
	noBase := b == nil
	if noBase {
		b = &ShardsKindResult{}
	}
	rp := r.Timings.RetryPeriod
	n := fmt.Sprintf("%d members x %d shards", r.Members, r.Shards)
	members := float64(r.Members)
	measured := func(k *ShardsKindResult) bool { return k.WindowSeconds > 0 }
	num := func(k *ShardsKindResult, v float64) string {
		if !measured(k) {
			return "n/a"
		}
		return fmtNum(v)
	}
	// judge applies g when both sides were measured (or g needs no baseline).
	judge := func(g *Goal, row Row, ours, base float64) Row {
		if !math.IsNaN(ours) && !math.IsNaN(base) {
			g.judge(&row, ours, base)
		}
		return row
	}
	ow, bw := perRetryPeriod(o.Writes, o.WindowSeconds, rp), perRetryPeriod(b.Writes, b.WindowSeconds, rp)
	oa, ba := perRetryPeriod(o.Requests.total(), o.WindowSeconds, rp), perRetryPeriod(b.Requests.total(), b.WindowSeconds, rp)
	nanIf := func(ok bool, v float64) float64 {
		if !ok {
			return math.NaN()
		}
		return v
	}
	rows := []Row{
		judge(goalShardsWrites, Row{Metric: fmt.Sprintf("%s: steady state, Lease writes per retry period (%v; POST, PUT, PATCH, DELETE, any status)", n, rp),
			Ours: num(o, ow), Baseline: num(b, bw), Ratio: ratio(ow, bw)}, nanIf(measured(o), ow), members),
		{Metric: n + ": steady state, Lease requests per retry period, all verbs", Ours: num(o, oa), Baseline: num(b, ba), Ratio: ratio(oa, ba)},
		{Metric: n + ": by verb, req/s (apiserver_request_total, minus other namespaces' Lease writes)", Ours: o.PerSecond.String(), Baseline: b.PerSecond.String()},
		{Metric: n + ": shard Leases that changed hands in the window", Ours: num(o, float64(o.HandsChanged)), Baseline: num(b, float64(b.HandsChanged))},
		{Metric: n + ": shards served at the window's end (distinct, in the members' GET /shards)", Ours: num(o, float64(o.ServedAtEnd)), Baseline: num(b, float64(b.ServedAtEnd))},
		judge(goalShardsCPU, Row{Metric: n + ": kube-apiserver CPU, s/s", Ours: o.APIServer.cpuCell(), Baseline: b.APIServer.cpuCell(), Ratio: ratio(o.APIServer.cpu(), b.APIServer.cpu())},
			o.APIServer.cpu(), b.APIServer.cpu()),
		judge(goalShardsRSS, Row{Metric: n + ": kube-apiserver RSS at the end of the window", Ours: o.APIServer.rssCell(), Baseline: b.APIServer.rssCell(), Ratio: ratio(o.APIServer.rss(), b.APIServer.rss())},
			o.APIServer.rss(), b.APIServer.rss()),
		{Metric: n + ": kube-apiserver RSS after its restart, before the members started", Ours: fmtMiB(float64(o.APIServerFreshRSS)), Baseline: fmtMiB(float64(b.APIServerFreshRSS))},
		{Metric: n + ": etcd CPU, s/s", Ours: o.Etcd.cpuCell(), Baseline: b.Etcd.cpuCell(), Ratio: ratio(o.Etcd.cpu(), b.Etcd.cpu())},
		judge(goalShardsWatches, Row{Metric: n + ": Lease watches the members hold (apiserver_longrunning_requests: the window's median, read every second, minus before they started)", Ours: watchesCell(o), Baseline: watchesCell(b)},
			nanIf(measured(o), o.Watches), members),
		{Metric: n + ": the members' CPU s/s, RSS (summed)", Ours: hostCell(o.Members), Baseline: hostCell(b.Members), Ratio: ratio(o.Members.cpu(), b.Members.cpu())},
		{Metric: n + ": start until every shard Lease is held (ours: and every shard served once, at a fair share)", Ours: startCell(o), Baseline: startCell(b)},
	}
	rows = append(rows, joinRows(r, o.Join, b.Join)...)
	leaseD := float64(r.Timings.LeaseDuration / time.Millisecond)
	for _, ph := range []struct {
		how    string
		o, b   *ShardsPhase
		goal   *Goal
		goalOf float64
	}{
		{"SIGTERM", o.Term, b.Term, goalShardsTerm, math.Inf(1)},
		{"SIGKILL", o.Kill, b.Kill, goalShardsKill, leaseD},
	} {
		held := func(p *ShardsPhase) string {
			if p == nil {
				return "n/a"
			}
			return fmt.Sprint(p.Held)
		}
		rows = append(rows,
			judge(ph.goal, Row{Metric: fmt.Sprintf("%s the member holding the most shards (ours %s, client-go %s): signal -> another member's GET /shards lists the shard with a higher token, p99 over its shards", ph.how, held(ph.o), held(ph.b)),
				Ours: fmtPhase(ph.o, p99), Baseline: fmtPhase(ph.b, p99), Ratio: ratio(phaseMs(ph.o, p99), phaseMs(ph.b, p99))}, phaseMs(ph.o, p99), ph.goalOf),
			Row{Metric: ph.how + ": the same, p50", Ours: fmtPhase(ph.o, p50), Baseline: fmtPhase(ph.b, p50), Ratio: ratio(phaseMs(ph.o, p50), phaseMs(ph.b, p50))},
			Row{Metric: ph.how + ": signal -> the bench's informer sees the shard's Lease held by another member with a higher token, p50 / p99 (n: the shards whose Lease it had seen so by the time every shard was served)", Ours: fmtLeasePhase(ph.o), Baseline: fmtLeasePhase(ph.b)},
		)
	}
	if noBase {
		for i := range rows {
			rows[i].Baseline, rows[i].Ratio = "n/a", "n/a"
		}
	}
	return rows
}

func watchesCell(k *ShardsKindResult) string {
	if k.WindowSeconds <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%s (%s − %s; in the window %s–%s)", fmtNum(k.Watches), fmtNum(k.WatchesOpen), fmtNum(k.WatchesBefore), fmtNum(k.WatchesSpread.Min), fmtNum(k.WatchesSpread.Max))
}

func startCell(k *ShardsKindResult) string {
	if k.StartSeconds <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f s", k.StartSeconds)
}

// joinRows are the rows of a member joining.
func joinRows(r *ShardsResult, o, b *ShardsJoin) []Row {
	if o == nil && b == nil {
		return nil
	}
	none := &ShardsJoin{FairLeaseMs: math.NaN(), FairServedMs: math.NaN()}
	oj, bj := o, b
	if oj == nil {
		oj = none
	}
	if bj == nil {
		bj = none
	}
	rp := float64(r.Timings.RetryPeriod / time.Millisecond)
	fair := func(j *ShardsJoin, v float64) string {
		switch {
		case j == none:
			return "n/a"
		case v < 0:
			return fmt.Sprintf("not within %s", fmtMs(j.WaitedMs))
		}
		return fmtMs(v) + " (from " + j.JoinedFrom + ")"
	}
	// judged: ours, +Inf when the fair share was not reached.
	judged := func(v float64) float64 {
		if v < 0 {
			return math.Inf(1)
		}
		return v
	}
	from := fmt.Sprintf("%d -> %d members: ", r.Members, r.Members+1)
	leaseRow := Row{Metric: from + "fair share (⌊N/M⌋ or ⌈N/M⌉ each) on the Leases", Ours: fair(oj, oj.FairLeaseMs), Baseline: fair(bj, bj.FairLeaseMs)}
	servedRow := Row{Metric: from + "fair share in the members' GET /shards (every shard served once)", Ours: fair(oj, oj.FairServedMs), Baseline: fair(bj, bj.FairServedMs)}
	moved := Row{Metric: from + "shards moved; moved more than once (the most moves of one shard)", Ours: movedCell(oj, none), Baseline: movedCell(bj, none)}
	if oj != none {
		goalShardsFair.judge(&leaseRow, judged(oj.FairLeaseMs), rp)
		goalShardsFair.judge(&servedRow, judged(oj.FairServedMs), rp)
		goalShardsMovedOnce.judge(&moved, float64(oj.MovedTwice), math.NaN())
	}
	holds := Row{Metric: from + "shards per member at the end (the new member's first)", Ours: holdsCell(oj, none), Baseline: holdsCell(bj, none)}
	joined := Row{Metric: from + "the new member's process start -> its session Lease seen (what the fair share is timed from)", Ours: joinedCell(oj, none), Baseline: joinedCell(bj, none)}
	return []Row{joined, leaseRow, servedRow, moved, holds}
}

func joinedCell(j, none *ShardsJoin) string {
	switch {
	case j == none:
		return "n/a"
	case j.StartToJoinMs <= 0:
		return "no session Lease"
	}
	return fmtMs(j.StartToJoinMs)
}

func movedCell(j, none *ShardsJoin) string {
	if j == none {
		return "n/a"
	}
	return fmt.Sprintf("%d; %d (%d)", j.Moved, j.MovedTwice, j.MaxMoves)
}

func holdsCell(j, none *ShardsJoin) string {
	if j == none {
		return "n/a"
	}
	return fmt.Sprintf("%d; %s; serving when the wait ended: %s", j.NewHolds, fmtHoldings(j.Holdings), fmtHoldings(j.Serving))
}
