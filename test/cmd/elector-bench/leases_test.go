package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

func TestParseProcStatCPUAddsUserAndSystemTicks(t *testing.T) {
	// pid (comm with ") " inside) state ppid ... utime=150 stime=50 ...
	line := "4242 (kube-apiserver) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 12 0 1000 2000000 3000 18446744073709551615\n"
	got, err := parseProcStatCPU(line)
	if err != nil {
		t.Fatal(err)
	}
	if got != 2.0 {
		t.Errorf("cpu = %v s, want 2 (200 ticks at %d Hz)", got, clockTicks)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 u s"} {
		if _, err := parseProcStatCPU(bad); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}

func TestLeasesRowsJudgeOursAgainstClientGo(t *testing.T) {
	r := &LeasesResult{Leases: 1000, Candidates: 3, Kinds: map[string]*LeasesKindResult{
		string(sc): {PerSecond: verbCounts{"PUT": 500}, HeldAtEnd: 1000, APIServer: &procUsage{CPUPerSecond: 0.5, RSSBytes: 600 << 20},
			Handoff: Dist{N: 20, P50: 30, P99: 100}},
		string(cg): {PerSecond: verbCounts{"GET": 1000, "PUT": 500}, HolderChanges: 2, HeldAtEnd: 999, APIServer: &procUsage{CPUPerSecond: 1.0, RSSBytes: 500 << 20},
			Handoff: Dist{N: 20, P50: 1000, P99: 2000}},
	}}
	rows := leasesRows(r)
	met := map[string]string{}
	for _, row := range rows {
		if row.Goal != "" {
			met[row.Metric[strings.Index(row.Metric, ": ")+2:]] = row.Met
		}
	}
	want := map[string]string{
		"Lease requests/s at the apiserver, steady state (apiserver_request_total)": "yes",
		"kube-apiserver CPU, s/s":                                                                    "yes",
		"kube-apiserver RSS at the end of the window":                                                "NO",
		"handoff p99 (leader stopped -> another candidate holds the Lease, n=20)":                    "yes",
		"unplanned leader changes in the window (a holder replaced or gone); Leases held at its end": "yes",
	}
	if len(met) != len(want) {
		t.Fatalf("judged rows %v, want %v", met, want)
	}
	for k, v := range want {
		if met[k] != v {
			t.Errorf("%s: met %q, want %q", k, met[k], v)
		}
	}
	if rows[0].Ratio != "0.33" || !strings.HasPrefix(rows[0].Metric, "1000 Leases x 3:") {
		t.Errorf("first row %+v", rows[0])
	}

	// Without the baseline nothing is judged against it and the baseline reads n/a.
	delete(r.Kinds, string(cg))
	for _, row := range leasesRows(r) {
		if row.Goal == "≤ client-go" || row.Baseline != "n/a" {
			t.Errorf("no baseline: %+v", row)
		}
	}
	// Leader changes in the window are a miss on their own.
	r.Kinds[string(sc)].HolderChanges = 1
	for _, row := range leasesRows(r) {
		if strings.Contains(row.Metric, "unplanned leader changes") && row.Met != "NO" {
			t.Errorf("1 leader change: %+v", row)
		}
	}
	// Without handoffs their cells read n/a, not 0.
	r.Kinds[string(sc)].Handoff = Dist{}
	for _, row := range leasesRows(r) {
		if strings.Contains(row.Metric, "handoff") && row.Ours != "n/a" {
			t.Errorf("no handoffs: %+v", row)
		}
	}
}

func TestIdleConnsRowsJudgeP99AgainstTheRunWithoutIdleConnections(t *testing.T) {
	run := func(kind string, p99, rps float64) LoadResult {
		return LoadResult{Target: kind, Mode: "fixed", RPS: rps, Latency: Dist{N: 4000, P50: p99 / 5, P99: p99}}
	}
	r := &IdleConnsResult{IdleConns: 1000, Rate: 1000, SilentOpened: 1000, SilentClosed: 1000,
		SilentCloseAfter: Dist{N: 1000, Min: 5000, Max: 5010}, KeepAliveOpened: 1000,
		Runs: []LoadResult{
			run(idleNone, 1.0, 1000), run(idleKeepAlive, 1.05, 1000), run(idleSilent, 1.5, 1000),
			run(idleNone, 1.2, 999), run(idleKeepAlive, 1.1, 1000), run(idleSilent, 1.4, 1000),
		}}
	got := map[string]string{}
	for _, row := range r.rows() {
		if row.Goal != "" {
			got[row.Metric] = row.Met
		}
	}
	want := map[string]string{
		"/token p99 at 1000 req/s, 1000 keep-alive idle connections":                                "yes", // 1.075 vs 1.1
		"/token achieved req/s, 1000 keep-alive idle connections":                                   "yes",
		"/token p99 at 1000 req/s, 1000 silent connections (before ReadHeaderTimeout)":              "NO", // 1.45 vs 1.1
		"/token achieved req/s, 1000 silent connections (before ReadHeaderTimeout)":                 "yes",
		"silent connections closed by the server (ReadHeaderTimeout 5s), after (from dial) min–max": "yes",
	}
	if len(got) != len(want) {
		t.Fatalf("judged rows %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: met %q, want %q", k, got[k], v)
		}
	}

	// A silent connection the server left open is a miss.
	r.SilentClosed = 999
	for _, row := range r.rows() {
		if strings.HasPrefix(row.Metric, "silent connections closed") && row.Met != "NO" {
			t.Errorf("999 of 1000 closed: %+v", row)
		}
	}
}

func TestIdleSilentDurationEndsBeforeTheReadHeaderTimeout(t *testing.T) {
	if got := idleSilentDuration(time.Second); got != time.Second {
		t.Errorf("1s: got %v", got)
	}
	if got := idleSilentDuration(time.Minute); got != 3500*time.Millisecond {
		t.Errorf("1m: got %v, want 3.5s (ReadHeaderTimeout 5s - settle - 1s)", got)
	}
}

func TestOpenIdleCountsConnectionsTheServerCloses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	ws, err := openIdle(ln.Addr().String(), "/token", 3, false)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(ws)
	// The server closes two of the three.
	for i := 0; i < 2; i++ {
		_ = (<-accepted).Close()
	}
	if err := framework.Poll(context.Background(), 5*time.Millisecond, 5*time.Second, func(context.Context) (bool, error) {
		n, ds := countClosed(ws)
		return n == 2 && len(ds) == 2, nil
	}); err != nil {
		n, _ := countClosed(ws)
		t.Fatalf("%d closed connections seen, want the 2 the server closed: %v", n, err)
	}
}

func TestParseFlagsLeasesAndIdleConns(t *testing.T) {
	o, err := parseFlags([]string{"--quick", "--only=leases,idleconns"})
	if err != nil {
		t.Fatal(err)
	}
	if o.leases != 100 || o.leasesCandidates != 3 || o.leasesTrials != 5 || !o.only["leases"] || !o.only["idleconns"] || o.idleConns != 1000 {
		t.Errorf("quick: %+v", o)
	}
	o, err = parseFlags([]string{"--quick", "--leases=300"})
	if err != nil || o.leases != 300 {
		t.Errorf("explicit --leases wins over --quick: %v %+v", err, o)
	}
	for _, bad := range [][]string{{"--leases=0"}, {"--leases-candidates=1"}, {"--idle-conns=0"}, {"--idle-rate=0"}, {"--leases-window=1s"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("%v: want an error", bad)
		}
	}
}
