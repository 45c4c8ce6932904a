package main

import (
	"strings"
	"testing"
)

func TestFenceRowsJudgePostgresAgainstTheGoalAndReportRedis(t *testing.T) {
	run := func(db, variant string, writers int, rps, p99 float64) FenceRun {
		return FenceRun{DB: db, Variant: variant, Writers: writers, PerSecond: rps, Latency: Dist{N: 100, P50: p99 / 2, P99: p99}}
	}
	r := &FenceResult{Writers: 8, Runs: []FenceRun{
		run("postgres", "fenced", 8, 500, 40), run("postgres", "plain", 8, 1000, 5), // costs 50%, +35 ms
		run("postgres", "fenced", 1, 900, 1.2), run("postgres", "plain", 1, 1000, 1.0), // costs 10%, +0.2 ms
		run("redis", "fenced", 8, 600, 3), run("redis", "plain", 8, 1200, 1),
		run("redis", "fenced", 1, 700, 2), run("redis", "plain", 1, 1000, 1),
	}}
	rows := r.rows()
	find := func(prefix string) Row { t.Helper(); return findRow(t, rows, prefix) }
	for _, tt := range []struct {
		prefix, ratio, met string
	}{
		{"postgres, 8 writers: writes/s", "0.50", "NO"},
		{"postgres, 8 writers: p99", "8.00", "NO"},
		{"postgres, 1 writer: writes/s", "0.90", "yes"},
		{"postgres, 1 writer: p99", "1.20", "yes"},
		{"redis, 8 writers: writes/s", "0.50", ""},
		{"redis, 1 writer: p99", "2.00", ""},
	} {
		row := find(tt.prefix)
		if row.Ratio != tt.ratio || row.Met != tt.met {
			t.Errorf("%s: ratio %q met %q, want %q %q", row.Metric, row.Ratio, row.Met, tt.ratio, tt.met)
		}
	}
	if got := find("postgres, 1 writer: p99").Metric; !strings.Contains(got, "fenced − plain = 200 µs") {
		t.Errorf("p99 row %q does not state the delta", got)
	}
	for _, row := range rows {
		if strings.Contains(row.Metric, "own cost") {
			t.Errorf("a row against the batched baseline without its runs: %q", row.Metric)
		}
	}

	// With the batched baseline's runs: a row of the fence's own cost, with
	// no goal, next to the judged ones.
	r.Runs = append(r.Runs, run("postgres", variantPlainBatched, 8, 625, 10), run("postgres", variantPlainBatched, 1, 1000, 1.1))
	rows = r.rows()
	for _, tt := range []struct{ prefix, ratio, delta string }{
		{"postgres, 8 writers: writes/s, the fence's own cost", "0.80", ""},
		{"postgres, 8 writers: p99 latency of one write against that baseline", "4.00", "fenced − batched plain = 30.0 ms"},
		{"postgres, 1 writer: writes/s, the fence's own cost", "0.90", ""},
	} {
		row := findRow(t, rows, tt.prefix)
		if row.Ratio != tt.ratio || row.Met != "" || row.Goal != "" || !strings.Contains(row.Metric, tt.delta) {
			t.Errorf("%s: ratio %q goal %q met %q, want %q, no goal, %q in the metric", row.Metric, row.Ratio, row.Goal, row.Met, tt.ratio, tt.delta)
		}
	}
	if row := find("postgres, 8 writers: writes/s, elector_fence()"); row.Ratio != "0.50" || row.Met != "NO" {
		t.Errorf("the judged row changed with the batched baseline: %+v", row)
	}
}

// findRow returns the first of rows whose metric starts with prefix, or fails the test.
func findRow(t *testing.T, rows []Row, prefix string) Row {
	t.Helper()
	for _, row := range rows {
		if strings.HasPrefix(row.Metric, prefix) {
			return row
		}
	}
	t.Fatalf("no row %q in %+v", prefix, rows)
	return Row{}
}
