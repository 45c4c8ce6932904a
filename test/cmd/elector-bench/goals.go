package main

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/localapi"
)

// Goal is one target a section's rows are judged against. Every goal lives
// in the goals table below: the sections take their "goal" and "met"
// columns from it, and the report prints it as the Goals table (which
// docs/benchmarks.md carries; TestDocsListEveryGoal keeps them in step).
type Goal struct {
	Section string // key of the section that measures it (allSections)
	Metric  string // what is judged
	Text    string // the goal, as the "goal" column shows it
	Issue   int    // the issue that set it
	// Check judges a measurement: ours and, where the goal is relative,
	// the baseline's figure, both in the unit the section passes.
	Check func(ours, base float64) bool
}

// judged is one goal's verdict on a row.
type judged struct {
	goal *Goal
	met  bool
}

// judge adds g to row's goals: the "goal" and "met" columns list each
// goal's text and verdict, joined by "; " when a row has more than one.
func (g *Goal) judge(row *Row, ours, base float64) {
	row.goals = append(row.goals, judged{g, g.Check(ours, base)})
	texts, mets := make([]string, len(row.goals)), make([]string, len(row.goals))
	for i, j := range row.goals {
		texts[i], mets[i] = j.goal.Text, verdict(j.met)
	}
	row.Goal, row.Met = strings.Join(texts, "; "), strings.Join(mets, "; ")
}

func atMost(limit float64) func(float64, float64) bool {
	return func(ours, _ float64) bool { return ours <= limit }
}

func below(limit float64) func(float64, float64) bool {
	return func(ours, _ float64) bool { return ours < limit }
}

// noWorseThanBase: ours ≤ the baseline's.
func noWorseThanBase(ours, base float64) bool { return ours <= base }

var (
	// 1. handoff (the SIGTERM and the POST /release series)
	goalHandoffP50 = &Goal{Section: "handoff", Metric: "graceful handoff p50 (SIGTERM, POST /release)", Text: "≤ 50 ms", Issue: 4, Check: atMost(50)}
	goalHandoffP99 = &Goal{Section: "handoff", Metric: "graceful handoff p99 (SIGTERM, POST /release)", Text: "≤ 200 ms", Issue: 4, Check: atMost(200)}
	// 2. failover (both definitions of the overhead)
	goalFailoverP99 = &Goal{Section: "failover", Metric: "crash failover overhead p99", Text: "≤ 100 ms", Issue: 4, Check: atMost(100)}
	// 3. api
	goalAPIFollower = &Goal{Section: "api", Metric: "idle follower: Lease requests/s", Text: "≤ 0.02/s", Issue: 4, Check: atMost(0.02)}
	// ours: the leader's Lease requests in the window minus the renews seen
	// (one more is allowed: the window may cut a renew in two).
	goalAPIRenew = &Goal{Section: "api", Metric: "leader: Lease requests per renew", Text: "1 write per renew", Issue: 4, Check: atMost(1)}
	// 4. localapi
	goalLocalMax = &Goal{Section: "localapi", Metric: "GET /leader, /token: max throughput vs a bare handler", Text: "≥ 0.70 × bare", Issue: 4,
		Check: func(ours, base float64) bool { return ours >= base*70/100 }}
	goalLocalP99 = &Goal{Section: "localapi", Metric: "GET /leader, /token: p99 at the fixed rate", Text: "< 1 ms", Issue: 4, Check: below(1)}
	// The same rows as goalLocalMax and goalLocalP99, tighter and relative:
	// medians of the repeats, against the bare handler's in the same run.
	goalLocalMaxRatio = &Goal{Section: "localapi", Metric: "GET /leader, /token: max throughput vs the bare handler in the same run (medians)", Text: "≥ 0.95 × bare", Issue: 12,
		Check: func(ours, base float64) bool { return ours >= base*95/100 }}
	goalLocalP99Ratio = &Goal{Section: "localapi", Metric: "GET /leader, /token: p99 at the fixed rate vs the bare handler in the same run (medians)", Text: "≤ 1.1 × bare", Issue: 12,
		Check: func(ours, base float64) bool { return ours <= base*110/100 }}
	goalLocalAllocs = &Goal{Section: "localapi", Metric: "allocations per request, the handler alone", Text: "≤ bare", Issue: 12, Check: noWorseThanBase}
	// 5. footprint; without a baseline (--skip-baseline) only the absolute limit is judged.
	goalFootprintRSS = &Goal{Section: "footprint", Metric: "RSS of an idle leader and follower", Text: "≤ 20 MiB and ≤ 0.9 × client-go", Issue: 12,
		Check: func(ours, base float64) bool { return ours <= 20<<20 && (base <= 0 || ours <= base*90/100) }}
	goalFootprintBinary = &Goal{Section: "footprint", Metric: "binary size (static, -trimpath -s -w)", Text: "≤ 18 MiB", Issue: 12, Check: atMost(18 << 20)}
	// 6. scale, by candidates
	goalScaleP50At3      = &Goal{Section: "scale", Metric: "3 candidates: handoff p50", Text: "≤ 12 ms", Issue: 12, Check: atMost(12)}
	goalScaleP50At10     = &Goal{Section: "scale", Metric: "10 candidates: handoff p50", Text: "≤ 20 ms", Issue: 12, Check: atMost(20)}
	goalScaleP50At100    = &Goal{Section: "scale", Metric: "100 candidates: handoff p50", Text: "≤ 30 ms", Issue: 12, Check: atMost(30)}
	goalScaleP99At100    = &Goal{Section: "scale", Metric: "100 candidates: handoff p99", Text: "≤ 100 ms", Issue: 12, Check: atMost(100)}
	goalScaleWritesAt100 = &Goal{Section: "scale", Metric: "100 candidates: Lease writes per handoff, median", Text: "≤ 10", Issue: 12, Check: atMost(10)}
	// ours: a handoff's p50; base: the limit probe's write + watch p50.
	goalScaleLimit = &Goal{Section: "scale", Metric: "SIGTERM and POST /release handoff p50 at every size vs one Lease write + one watch delivery (the bench's probe, same run)", Text: "≤ 1.3 ×", Issue: 25,
		Check: func(ours, base float64) bool { return ours <= base*1.3 }}
	goalScaleBelowClientGo = &Goal{Section: "scale", Metric: "SIGTERM handoff p50 and p99 at every size vs client-go", Text: "< client-go", Issue: 25,
		Check: func(ours, base float64) bool { return ours < base }}
	// 7. fence (PostgreSQL; Redis has no numeric goal)
	goalFenceThroughput = &Goal{Section: "fence", Metric: "PostgreSQL: fenced writes/s vs unfenced", Text: "fence costs ≤ 15% throughput (ratio ≥ 0.85)", Issue: 11,
		Check: func(ours, base float64) bool { return ours >= base*85/100 }}
	goalFenceP99 = &Goal{Section: "fence", Metric: "PostgreSQL: p99 of one write, fenced − plain", Text: "p99 delta ≤ 0.5 ms", Issue: 11,
		Check: func(ours, base float64) bool { return ours-base <= 0.5 }}
	// 8. push; ours is +Inf when a client missed a change.
	goalPushP99 = &Goal{Section: "push", Metric: "GET /watch and the long-poll, at the new leader and a follower: Lease write -> app p99", Text: "≤ 20 ms", Issue: 10, Check: atMost(20)}
	// ours: reads later than 50 ms (plus streams that missed the change).
	goalPushFanout = &Goal{Section: "push", Metric: "1,000 /watch streams on one sidecar: Lease write -> each stream's read of the release and of the acquisition", Text: "every one ≤ 50 ms", Issue: 10, Check: atMost(0)}
	// ours: KiB of VmRSS per stream (with 1,000 streams − idle); 27.3 KiB was measured before each event
	// was encoded once for all streams.
	goalPushRSS = &Goal{Section: "push", Metric: "1,000 /watch streams: RSS per stream", Text: "≤ 27.3 KiB", Issue: 25, Check: atMost(27.3)}
	// 9. leases
	goalLeasesRequests = &Goal{Section: "leases", Metric: "Lease requests/s at the apiserver", Text: "≤ client-go", Issue: 12, Check: noWorseThanBase}
	// ours: unplanned leader changes plus Leases not held at the window's end.
	goalLeasesStable  = &Goal{Section: "leases", Metric: "unplanned leader changes; Leases held at the window's end", Text: "0; all", Issue: 12, Check: atMost(0)}
	goalLeasesCPU     = &Goal{Section: "leases", Metric: "kube-apiserver CPU", Text: "≤ client-go", Issue: 12, Check: noWorseThanBase}
	goalLeasesRSS     = &Goal{Section: "leases", Metric: "kube-apiserver RSS", Text: "≤ client-go", Issue: 12, Check: noWorseThanBase}
	goalLeasesHandoff = &Goal{Section: "leases", Metric: "handoff p99", Text: "≤ client-go", Issue: 12, Check: noWorseThanBase}
	// 10. idleconns
	goalIdleP99 = &Goal{Section: "idleconns", Metric: "/token p99 with the idle connections open vs none", Text: "≤ 1.1× none", Issue: 12,
		Check: func(ours, base float64) bool { return ours <= base*110/100 }}
	// ours: the slowest run's rate; base: the fixed rate asked for.
	goalIdleRate = &Goal{Section: "idleconns", Metric: "/token achieved rate with the idle connections open", Text: "≥ 99% of the fixed rate", Issue: 12,
		Check: func(ours, base float64) bool { return ours >= base*99/100 }}
	// ours: ms from dial to the last close, +Inf when one stayed open.
	goalIdleClosed = &Goal{Section: "idleconns", Metric: "silent connections closed by the server", Text: fmt.Sprintf("all, within %v", idleCloseLimit), Issue: 12,
		Check: atMost(float64(idleCloseLimit / time.Millisecond))}
	// 11. objfence
	goalObjFenceP99 = &Goal{Section: "objfence", Metric: "ConfigMap update p99, with the fence policy − without", Text: "p99 delta ≤ 1 ms", Issue: 26,
		Check: func(ours, base float64) bool { return ours-base <= 1 }}
	// 12. shards (3 members x 1,000 shards). ours: writes per retry period;
	// base: the members.
	goalShardsWrites = &Goal{Section: "shards", Metric: "steady-state Lease writes per retry period", Text: "≤ 1 per member (3 at 3 members)", Issue: 24,
		Check: func(ours, members float64) bool { return ours <= members }}
	goalShardsCPU = &Goal{Section: "shards", Metric: "kube-apiserver CPU", Text: "< client-go", Issue: 24, Check: func(ours, base float64) bool { return ours < base }}
	goalShardsRSS = &Goal{Section: "shards", Metric: "kube-apiserver RSS", Text: "< client-go", Issue: 24, Check: func(ours, base float64) bool { return ours < base }}
	// base: the members.
	goalShardsWatches = &Goal{Section: "shards", Metric: "Lease watches open", Text: "= members", Issue: 24, Check: func(ours, members float64) bool { return ours == members }}
	// ours: SIGKILL -> another member serves the shard, p99 over its shards (ms; +Inf when one never was); base: leaseDuration (ms).
	goalShardsKill = &Goal{Section: "shards", Metric: "SIGKILL a member: its shards served by others, p99", Text: "≤ leaseDuration + 1 s", Issue: 24,
		Check: func(ours, leaseDuration float64) bool { return ours <= leaseDuration+1000 }}
	goalShardsTerm = &Goal{Section: "shards", Metric: "SIGTERM a member: its shards served by others, p99", Text: "≤ 100 ms", Issue: 24, Check: atMost(100)}
	// ours: join -> fair share (ms; +Inf when not reached); base: the retry period (ms).
	goalShardsFair = &Goal{Section: "shards", Metric: "3 -> 4 members: fair share, on the Leases and served", Text: "≤ 2 retry periods", Issue: 24,
		Check: func(ours, retryPeriod float64) bool { return ours <= 2*retryPeriod }}
	// ours: shards moved more than once.
	goalShardsMovedOnce = &Goal{Section: "shards", Metric: "3 -> 4 members: each moved shard moved once", Text: "no shard moves twice", Issue: 24, Check: atMost(0)}
)

// idleCloseLimit is when every silent connection must have been closed.
const idleCloseLimit = localapi.ReadHeaderTimeout + time.Second

// goals is the table, in section order.
var goals = []*Goal{
	goalHandoffP50, goalHandoffP99,
	goalFailoverP99,
	goalAPIFollower, goalAPIRenew,
	goalLocalMax, goalLocalP99, goalLocalMaxRatio, goalLocalP99Ratio, goalLocalAllocs,
	goalFootprintRSS, goalFootprintBinary,
	goalScaleP50At3, goalScaleP50At10, goalScaleP50At100, goalScaleP99At100, goalScaleWritesAt100, goalScaleLimit, goalScaleBelowClientGo,
	goalFenceThroughput, goalFenceP99,
	goalPushP99, goalPushFanout, goalPushRSS,
	goalLeasesRequests, goalLeasesStable, goalLeasesCPU, goalLeasesRSS, goalLeasesHandoff,
	goalIdleP99, goalIdleRate, goalIdleClosed,
	goalObjFenceP99,
	goalShardsWrites, goalShardsCPU, goalShardsRSS, goalShardsWatches, goalShardsKill, goalShardsTerm, goalShardsFair, goalShardsMovedOnce,
}

// missedIf returns v, or +Inf when missed (a goal on v then fails).
func missedIf(missed bool, v float64) float64 {
	if missed {
		return math.Inf(1)
	}
	return v
}

// goalVerdict sums up a goal over the run's rows: "yes" when every row
// judged by it met it, "NO" when one did not, "not measured" when none
// judged it, "not run" when its section did not run.
func (r *Report) goalVerdict(g *Goal) string {
	ran, judged, missed := false, 0, 0
	for _, s := range r.Sections {
		ran = ran || s.Key == g.Section
		for _, row := range s.Rows {
			for _, j := range row.goals {
				if j.goal == g {
					judged++
					if !j.met {
						missed++
					}
				}
			}
		}
	}
	switch {
	case !ran:
		return "not run"
	case judged == 0:
		return "not measured"
	case missed > 0:
		return fmt.Sprintf("NO (%d of %d)", missed, judged)
	}
	return "yes"
}

// goalsMarkdown is the goals table; with a report, a "met" column too.
func goalsMarkdown(r *Report) string {
	var b strings.Builder
	if r == nil {
		b.WriteString("| section | metric | goal | issue |\n|---|---|---|---:|\n")
	} else {
		b.WriteString("| section | metric | goal | issue | met |\n|---|---|---|---:|---|\n")
	}
	for _, g := range goals {
		fmt.Fprintf(&b, "| %s | %s | %s | %d |", g.Section, mdEscape(g.Metric), mdEscape(g.Text), g.Issue)
		if r != nil {
			fmt.Fprintf(&b, " %s |", r.goalVerdict(g))
		}
		b.WriteString("\n")
	}
	return b.String()
}
