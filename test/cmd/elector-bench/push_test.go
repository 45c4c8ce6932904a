package main

import (
	"strings"
	"testing"
	"time"
)

func TestReadSSEStampsEveryDataLineOfTheStream(t *testing.T) {
	stream := "id: \"a\"\nevent: leader\ndata: {\"holder\":\"x\"}\n\n: heartbeat\n\nid: \"b\"\r\nevent: leader\r\ndata: {\"holder\":\"y\"}\r\n\r\n"
	var got []string
	before := time.Now()
	if err := readSSE(strings.NewReader(stream), func(at time.Time, data []byte) {
		if at.Before(before) {
			t.Errorf("event stamped %v, before the read started", at)
		}
		got = append(got, string(data))
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != `{"holder":"x"}` || got[1] != `{"holder":"y"}` {
		t.Fatalf("data lines %q", got)
	}
}

func TestAppClientKeepsOnlyChangesOfHolderOrIsLeader(t *testing.T) {
	ac := &appClient{method: methPoll100}
	t0 := time.Unix(1000, 0)
	bodies := []string{
		`{"isLeader":false,"holder":"a","leaseTransitions":1}`,
		`{"isLeader":false,"holder":"a","leaseTransitions":1}`, // the same state, polled again
		`{"isLeader":false,"holder":"","leaseTransitions":1}`,  // released
		`{"isLeader":true,"holder":"b","leaseTransitions":2,"token":2,"expiresInMs":9000}`,
		`{"isLeader":true,"holder":"b","leaseTransitions":2,"token":2,"expiresInMs":8000}`, // a renew
	}
	for i, b := range bodies {
		if err := ac.record(t0.Add(time.Duration(i)*time.Second), []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	if len(ac.obs) != 3 {
		t.Fatalf("kept %d states, want 3: %+v", len(ac.obs), ac.obs)
	}
	ob, ok := ac.firstAfter(t0.Add(time.Second), func(o pushObs) bool { return o.holder == "b" && o.isLeader })
	if !ok || !ob.at.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("first leading state %+v %v, want the one seen at +3s", ob, ok)
	}
	if _, ok := ac.firstAfter(t0.Add(4*time.Second), func(o pushObs) bool { return o.holder == "b" }); ok {
		t.Fatal("found a state seen before the time asked for")
	}
	if err := ac.record(t0, []byte("not json")); err == nil {
		t.Fatal("a malformed body was accepted")
	}
}

func TestSummariseFanoutMeasuresFromTheWriteAndFromTheFirstStream(t *testing.T) {
	ref := time.Unix(2000, 0)
	ms := func(n int) time.Time { return ref.Add(time.Duration(n) * time.Millisecond) }
	s := summariseFanout(ref, []time.Time{ms(12), ms(10), ms(61), {}, ms(30)}, 50*time.Millisecond)
	if s.missed != 1 || s.late != 1 || s.max != 61*time.Millisecond {
		t.Fatalf("missed %d late %d max %v, want 1 1 61ms", s.missed, s.late, s.max)
	}
	want := []time.Duration{12, 10, 61, 30}
	wantFirst := []time.Duration{2, 0, 51, 20}
	for i := range want {
		if s.fromWrite[i] != want[i]*time.Millisecond || s.fromFirst[i] != wantFirst[i]*time.Millisecond {
			t.Fatalf("stream %d: from the write %v, from the first %v; want %v, %v", i, s.fromWrite[i], s.fromFirst[i], want[i]*time.Millisecond, wantFirst[i]*time.Millisecond)
		}
	}
}

func TestMetricValueReadsUnlabelledSamplesOnly(t *testing.T) {
	text := []byte(`# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines_total{x="y"} 99
go_goroutines 2013
go_memstats_heap_inuse_bytes 4.3122688e+06
bad_value abc
`)
	for _, tc := range []struct {
		name string
		want float64
		ok   bool
	}{{"go_goroutines", 2013, true}, {"go_memstats_heap_inuse_bytes", 4312268.8, true}, {"missing", 0, false}, {"bad_value", 0, false}} {
		got, ok := metricValue(text, tc.name)
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s: %v %v, want %v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestHolderIsMatchesTheWholeHolder(t *testing.T) {
	body := []byte(`{"isLeader":false,"holder":"sc-12","identity":"sc-1","lease":"ns/l"}`)
	if !holderIs(body, "sc-12") || holderIs(body, "sc-1") || holderIs(body, "") || holderIs([]byte("{"), "sc-12") {
		t.Fatal("holderIs matched the wrong holder")
	}
}

func TestPushRowsJudgeThePushMethodsAgainstTwentyMilliseconds(t *testing.T) {
	d := func(p50, p99 float64) Dist { return Dist{N: 25, P50: p50, P99: p99, Max: p99} }
	r := &PushResult{Rounds: 25, Latency: map[string]Dist{
		pushKey("leader", methWatch): d(2, 8), pushKey("leader", methLongPoll): d(3, 25),
		pushKey("leader", methPoll100): d(50, 100), pushKey("leader", methPoll1s): d(500, 1000),
		pushKey("follower", methWatch): d(4, 12), pushKey("follower", methLongPoll): d(4, 15),
		pushKey("follower", methPoll100): d(55, 99), pushKey("follower", methPoll1s): d(480, 990),
	}, Missed: map[string]int{pushKey("follower", methLongPoll): 1},
		Fanout: &FanoutResult{Watchers: 1000, Rounds: 2, FromWrite: Dist{N: 2000, P50: 9, P99: 40, Max: 55}, FromFirst: Dist{N: 2000, P50: 3, P99: 20, Max: 30},
			Release: FanoutEvent{FromWrite: Dist{N: 2000, P50: 5, P99: 20, Max: 30}, FromFirst: Dist{N: 2000, P50: 2, P99: 10, Max: 12}},
			Late:    3, Idle: SidecarMem{RSSBytes: 20 << 20, Goroutines: 13, HeapInuse: 3 << 20}, Busy: SidecarMem{RSSBytes: 30 << 20, Goroutines: 2013, HeapInuse: 8 << 20}},
	}
	rows := r.rows()
	find := func(prefix string) Row { t.Helper(); return findRow(t, rows, prefix) }
	for _, tt := range []struct{ prefix, ours, ratio, met string }{
		{"GET /watch (SSE), app at the new leader: p99", "8.00 ms", "0.0080", "yes"},
		{"GET /leader?wait=30s long-poll, app at the new leader: p99", "25.0 ms", "0.025", "NO"},
		{"GET /leader?wait=30s long-poll, app at a follower: p99", "15.0 ms", "0.015", "NO"}, // missed a round
		{"GET /leader every 100 ms, app at a follower: p99", "99.0 ms", "0.10", ""},
		{"GET /watch (SSE), app at a follower: Lease write -> app, p50", "4.00 ms", "0.0083", ""},
	} {
		row := find(tt.prefix)
		if row.Ours != tt.ours || row.Ratio != tt.ratio || row.Met != tt.met {
			t.Errorf("%s: ours %q ratio %q met %q, want %q %q %q", row.Metric, row.Ours, row.Ratio, row.Met, tt.ours, tt.ratio, tt.met)
		}
	}
	if row := find("1000 /watch streams, 2nd change"); row.Met != "NO" || row.Ours != "9.00 ms / 40.0 ms / 55.0 ms" {
		t.Errorf("fan-out row %+v", row)
	}
	if row := find("1000 /watch streams on one follower, 1st change"); row.Met != "yes" || row.Ours != "5.00 ms / 20.0 ms / 30.0 ms" {
		t.Errorf("release fan-out row %+v", row)
	}
	if row := find("memory per stream"); !strings.HasPrefix(row.Ours, "10.2 KiB") || row.Met != "yes" {
		t.Errorf("memory row %+v, want 10.2 KiB per stream, within the goal", row)
	}
	if row := find("goroutines per stream"); !strings.HasPrefix(row.Ours, "2.00 ") {
		t.Errorf("goroutines row %+v", row)
	}
}

// TestPushRowsJudgeRSSPerStreamAgainstTheGoal: the memory row meets the
// goal at 27.3 KiB per stream and not above.
func TestPushRowsJudgeRSSPerStreamAgainstTheGoal(t *testing.T) {
	for _, tt := range []struct {
		perStream int64 // bytes
		met       string
	}{{27 << 10, "yes"}, {27*1024 + 307, "yes"}, {27*1024 + 308, "NO"}, {28 << 10, "NO"}} {
		r := &PushResult{Fanout: &FanoutResult{Watchers: 1000, Rounds: 1, FromWrite: Dist{N: 1000, P50: 9, P99: 40, Max: 45},
			Idle: SidecarMem{RSSBytes: 16 << 20}, Busy: SidecarMem{RSSBytes: 16<<20 + 1000*tt.perStream}}}
		if row := findRow(t, r.rows(), "memory per stream"); row.Met != tt.met {
			t.Errorf("%d bytes per stream: %+v, want met %q", tt.perStream, row, tt.met)
		}
	}
}
