package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGoalsTableHasGoalsForEverySectionAndNothingElse(t *testing.T) {
	bySection := map[string]int{}
	metrics := map[string]bool{}
	for _, g := range goals {
		bySection[g.Section]++
		if g.Metric == "" || g.Text == "" || g.Issue <= 0 || g.Check == nil {
			t.Errorf("incomplete goal %+v", *g)
		}
		if metrics[g.Section+" "+g.Metric] {
			t.Errorf("goal %s %q listed twice", g.Section, g.Metric)
		}
		metrics[g.Section+" "+g.Metric] = true
	}
	known := map[string]bool{}
	for _, s := range allSections {
		known[s] = true
		if bySection[s] == 0 {
			t.Errorf("section %s has no goal row", s)
		}
	}
	for s := range bySection {
		if !known[s] {
			t.Errorf("goal for unknown section %q", s)
		}
	}
	// The table is in section order.
	last := 0
	for _, g := range goals {
		i := 0
		for j, s := range allSections {
			if s == g.Section {
				i = j
			}
		}
		if i < last {
			t.Errorf("goal %s %q out of section order", g.Section, g.Metric)
		}
		last = i
	}
}

func TestGoalChecksAtTheirBoundaries(t *testing.T) {
	const mib = 1 << 20
	nan := math.NaN()
	for _, tc := range []struct {
		g          *Goal
		ours, base float64
		want       bool
	}{
		{goalHandoffP50, 50, nan, true}, {goalHandoffP50, 50.01, nan, false},
		{goalHandoffP99, 200, nan, true}, {goalHandoffP99, 200.01, nan, false},
		{goalFailoverP99, 100, nan, true}, {goalFailoverP99, -90, nan, true}, {goalFailoverP99, 100.01, nan, false},
		{goalAPIFollower, 0.02, 0.3, true}, {goalAPIFollower, 0.021, 0, false},
		{goalAPIRenew, 1, nan, true}, {goalAPIRenew, 2, nan, false},
		{goalLocalMax, 70, 100, true}, {goalLocalMax, 69.9, 100, false},
		{goalLocalP99, 0.999, 0.5, true}, {goalLocalP99, 1, 0.5, false},
		// issue 12: medians against the bare handler's in the same run
		{goalLocalMaxRatio, 95, 100, true}, {goalLocalMaxRatio, 94.9, 100, false},
		{goalLocalP99Ratio, 1.1, 1, true}, {goalLocalP99Ratio, 1.11, 1, false},
		{goalLocalAllocs, 3, 3, true}, {goalLocalAllocs, 4, 3, false},
		// issue 12: ≤ 20 MiB and ≤ 0.9 × client-go
		{goalFootprintRSS, 18 * mib, 20 * mib, true},
		{goalFootprintRSS, 18*mib + 1, 20 * mib, false}, // above 0.9 × client-go
		{goalFootprintRSS, 20 * mib, 30 * mib, true},
		{goalFootprintRSS, 20*mib + 1, 30 * mib, false}, // above 20 MiB
		{goalFootprintRSS, 20 * mib, 0, true},           // no baseline: the absolute limit alone
		{goalFootprintBinary, 18 * mib, 40 * mib, true}, {goalFootprintBinary, 18*mib + 1, 40 * mib, false},
		{goalScaleP50At3, 12, nan, true}, {goalScaleP50At3, 12.1, nan, false},
		{goalScaleP50At10, 20, nan, true}, {goalScaleP50At10, 20.1, nan, false},
		{goalScaleP50At100, 30, nan, true}, {goalScaleP50At100, 30.1, nan, false},
		{goalScaleP99At100, 100, nan, true}, {goalScaleP99At100, 100.1, nan, false},
		{goalScaleWritesAt100, 10, 3, true}, {goalScaleWritesAt100, 11, 3, false},
		{goalFenceThroughput, 170, 200, true}, {goalFenceThroughput, 169.9, 200, false},
		{goalFenceP99, 1.5, 1, true}, {goalFenceP99, 1.51, 1, false},
		{goalPushP99, 20, nan, true}, {goalPushP99, 20.01, nan, false}, {goalPushP99, missedIf(true, 5), nan, false},
		{goalPushFanout, 0, nan, true}, {goalPushFanout, 1, nan, false},
		{goalLeasesRequests, 500, 500, true}, {goalLeasesRequests, 501, 500, false},
		{goalLeasesStable, 0, nan, true}, {goalLeasesStable, 1, nan, false},
		{goalLeasesCPU, 1, 1, true}, {goalLeasesCPU, 1.01, 1, false},
		{goalLeasesRSS, 1, 1, true}, {goalLeasesRSS, 1.01, 1, false},
		{goalLeasesHandoff, 1, 1, true}, {goalLeasesHandoff, 1.01, 1, false},
		{goalIdleP99, 1.1, 1, true}, {goalIdleP99, 1.11, 1, false},
		{goalIdleRate, 990, 1000, true}, {goalIdleRate, 989.9, 1000, false},
		{goalIdleClosed, 6000, nan, true}, {goalIdleClosed, 6000.1, nan, false}, {goalIdleClosed, missedIf(true, 5000), nan, false},
	} {
		if got := tc.g.Check(tc.ours, tc.base); got != tc.want {
			t.Errorf("%s %q (%s): ours %v, base %v: met %v, want %v", tc.g.Section, tc.g.Metric, tc.g.Text, tc.ours, tc.base, got, tc.want)
		}
	}
}

func TestFootprintRowsJudgeRSSAgainstIssue12(t *testing.T) {
	mem := func(role string, mib float64) ProcMem { return ProcMem{Role: role, RSSBytes: int64(mib * (1 << 20))} }
	r := &FootprintResult{
		Procs: map[string][]ProcMem{
			string(sc): {mem("leader", 17.7), mem("follower", 19)},
			string(cg): {mem("leader", 22.9), mem("follower", 20)}, // follower: 19 > 0.9 × 20
		},
		BinaryBytes: map[string]int64{string(sc): 17 << 20, string(cg): 40 << 20},
	}
	rows := r.rows()
	if len(rows) != 3 {
		t.Fatalf("rows %+v", rows)
	}
	for i, want := range []string{"yes", "NO", "yes"} {
		if rows[i].Met != want || rows[i].Goal == "" {
			t.Errorf("%s: goal %q met %q, want %q", rows[i].Metric, rows[i].Goal, rows[i].Met, want)
		}
	}
	if rows[0].Goal != "≤ 20 MiB and ≤ 0.9 × client-go" || rows[2].Goal != "≤ 18 MiB" {
		t.Errorf("goals %q, %q", rows[0].Goal, rows[2].Goal)
	}
}

func TestLocalAPIRowsJudgeThroughputAndP99AgainstBothIssues(t *testing.T) {
	run := func(target, mode string, rps, p99 float64) LoadResult {
		return LoadResult{Target: target, Mode: mode, RPS: rps, Latency: Dist{N: 100, P50: p99 / 4, P99: p99}}
	}
	r := &LocalAPIResult{Rate: 5000}
	for _, f := range []float64{1, 0.9, 1.1} { // medians: bare 30000 / 0.8 ms
		r.Runs = append(r.Runs,
			run("bare net/http", "max", 30000*f, 5), run("/leader", "max", 29000*f, 5), run("/token", "max", 27000*f, 5),
			run("bare net/http", "fixed", 5000, 0.8*f), run("/leader", "fixed", 5000, 0.87*f), run("/token", "fixed", 5000, 1.0*f))
	}
	got := map[string][2]string{}
	for _, row := range r.rows() {
		got[row.Metric] = [2]string{row.Goal, row.Met}
	}
	for metric, want := range map[string][2]string{
		"GET /leader: max throughput, req/s (median; min–max)": {"≥ 0.70 × bare; ≥ 0.95 × bare", "yes; yes"}, // 0.967
		"GET /token: max throughput, req/s (median; min–max)":  {"≥ 0.70 × bare; ≥ 0.95 × bare", "yes; NO"},  // 0.90
		"GET /leader at 5000 req/s: p99 (send -> response)":    {"< 1 ms; ≤ 1.1 × bare", "yes; yes"},         // 0.87 ms, 1.09 ×
		"GET /token at 5000 req/s: p99 (send -> response)":     {"< 1 ms; ≤ 1.1 × bare", "NO; NO"},           // 1 ms, 1.25 ×
		"GET /leader: p99 at max throughput":                   {"", ""},
	} {
		if g, ok := got[metric]; !ok || g != want {
			t.Errorf("%s: goal, met %q, want %q (rows %q)", metric, g, want, got)
		}
	}
	rep := &Report{Sections: []*Section{{Key: "localapi", Rows: r.rows()}}}
	for g, want := range map[*Goal]string{goalLocalMax: "yes", goalLocalMaxRatio: "NO (1 of 2)", goalLocalP99: "NO (1 of 2)", goalLocalP99Ratio: "NO (1 of 2)", goalLocalAllocs: "not measured"} {
		if v := rep.goalVerdict(g); v != want {
			t.Errorf("%q %s: verdict %q, want %q", g.Metric, g.Text, v, want)
		}
	}
}

func TestReportGoalVerdictSumsUpTheRowsOfAGoal(t *testing.T) {
	handoff := &Section{Key: "handoff", Rows: handoffRows(map[string]*TrialsResult{
		"elector-sidecar/sigterm": {Latency: Dist{N: 30, P50: 10, P99: 30}},
		"elector-sidecar/release": {Latency: Dist{N: 30, P50: 60, P99: 90}},
	})}
	r := &Report{Sections: []*Section{handoff, {Key: "api"}}}
	for _, tc := range []struct {
		g    *Goal
		want string
	}{
		{goalHandoffP50, "NO (1 of 2)"}, // POST /release p50 60 ms
		{goalHandoffP99, "yes"},
		{goalAPIFollower, "not measured"},
		{goalFenceP99, "not run"},
	} {
		if got := r.goalVerdict(tc.g); got != tc.want {
			t.Errorf("%s %q: %q, want %q", tc.g.Section, tc.g.Metric, got, tc.want)
		}
	}
	md := r.markdown()
	if !strings.Contains(md, "#### Goals") || !strings.Contains(md, "| handoff | graceful handoff p50 (SIGTERM, POST /release) | ≤ 50 ms | 4 | NO (1 of 2) |") {
		t.Errorf("markdown has no goals table with verdicts:\n%s", md)
	}
}

func TestInSectionOrderFollowsAllSections(t *testing.T) {
	var ss []*Section
	for _, k := range []string{"idleconns", "localapi", "handoff", "footprint", "failover", "leases"} {
		ss = append(ss, &Section{Key: k})
	}
	var got []string
	for _, s := range inSectionOrder(ss) {
		got = append(got, s.Key)
	}
	if want := "handoff failover localapi footprint leases idleconns"; strings.Join(got, " ") != want {
		t.Errorf("order %q, want %q", got, want)
	}
}

// TestDocsListEveryGoal: docs/benchmarks.md carries the goals table as
// goalsMarkdown renders it.
func TestDocsListEveryGoal(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := goalsMarkdown(nil); !strings.Contains(string(b), want) {
		t.Errorf("docs/benchmarks.md does not contain the goals table; paste this:\n%s", want)
	}
}
