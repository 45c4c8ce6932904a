package main

import (
	"context"
	"image/color"
	"image/png"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	s := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct {
		q    float64
		want float64
	}{{0.25, 3}, {0.5, 5}, {0.95, 10}, {0.99, 10}, {0.1, 1}, {1, 10}} {
		if got := quantile(s, tc.q); got != tc.want {
			t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if !math.IsNaN(quantile(nil, 0.5)) {
		t.Error("quantile of nothing should be NaN")
	}
}

func TestNewDist(t *testing.T) {
	d := NewDist([]time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond}, true)
	if d.N != 3 || d.Min != 1 || d.Max != 3 || d.P50 != 2 || d.Mean != 2 || d.StdDev != 1 || len(d.Raw) != 3 {
		t.Errorf("unexpected %+v", d)
	}
}

func TestParseLeaseRequests(t *testing.T) {
	metrics := []byte(`# HELP apiserver_request_total x
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 7
apiserver_request_total{code="409",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="namespace",subresource="",verb="WATCH",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1"} 5
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="status",verb="GET",version="v1"} 3
`)
	for _, tc := range []struct {
		byCode bool
		want   verbCounts
	}{
		{false, verbCounts{"PUT": 9, "WATCH": 1}},
		{true, verbCounts{"PUT 200": 7, "PUT 409": 2, "WATCH 200": 1}},
	} {
		got := parseLeaseRequests(metrics, tc.byCode)
		if len(got) != len(tc.want) {
			t.Fatalf("byCode=%v: got %v, want %v", tc.byCode, got, tc.want)
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("byCode=%v: %s = %v, want %v", tc.byCode, k, got[k], v)
			}
		}
	}
	if s := (verbCounts{"PUT": 2, "GET": 0.5, "LIST": 0}).String(); s != "GET 0.500, PUT 2.00" {
		t.Errorf("String() = %q", s)
	}
	if s := (verbCounts{}).String(); s != "none" {
		t.Errorf("String() = %q", s)
	}
}

// TestRunLoad drives an in-process server with both modes of the load
// generator (no timing assertions: the machine may be loaded).
func TestRunLoad(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ok" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(bareBody)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()
	addr := ln.Addr().String()
	for _, rate := range []float64{0, 500} {
		r, err := runLoad(context.Background(), "t", addr, "/ok", 4, rate, 300*time.Millisecond)
		if err != nil {
			t.Fatalf("rate %v: %v", rate, err)
		}
		if r.Requests == 0 || r.Errors != 0 || r.Latency.N != r.Requests {
			t.Errorf("rate %v: %+v", rate, r)
		}
		if (rate > 0) != (r.FromSchedule != nil) {
			t.Errorf("rate %v: FromSchedule = %v", rate, r.FromSchedule)
		}
	}
	if _, err := runLoad(context.Background(), "t", addr, "/missing", 2, 0, 100*time.Millisecond); err == nil {
		t.Error("404s should fail the run")
	}
}

func TestParseBenchOutput(t *testing.T) {
	out := []byte(`goos: linux
BenchmarkLocalAPIBareHandler-2         	   20000	       534.7 ns/op	      35 B/op	       3 allocs/op
BenchmarkLocalAPILeader-2              	   20000	      1128 ns/op	       0 B/op	       0 allocs/op
BenchmarkLocalAPIToken                 	   20000	       123.2 ns/op	       8 B/op	       1 allocs/op
BenchmarkOther-2                       	   20000	       1 ns/op	       0 B/op	       0 allocs/op
PASS
`)
	got := parseBenchOutput(out)
	want := map[string]HandlerCost{
		"BareHandler": {NsPerOp: 534.7, BytesPerOp: 35, AllocsPerOp: 3},
		"Leader":      {NsPerOp: 1128},
		"Token":       {NsPerOp: 123.2, BytesPerOp: 8, AllocsPerOp: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %+v, want %+v", k, got[k], v)
		}
	}
}

func TestWriteCDFPlotWritesAPNGWithEveryCurve(t *testing.T) {
	p := filepath.Join(t.TempDir(), "p.png")
	err := writeCDFPlot(p, "graceful handoff latency", []Series{
		{Label: "ours", Color: colOurs, Ms: []float64{0.4, 9, 12, 15, 30}}, // 0.4: below the axis, drawn on it
		{Label: "client-go", Color: colBase, Ms: []float64{400, 1200, 2500}},
	})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != plotWidthPx || b.Dy() != plotHeightPx {
		t.Errorf("size %v, want %dx%d", b, plotWidthPx, plotHeightPx)
	}
	// Each curve (and its legend line) is drawn in its colour.
	for _, c := range []color.RGBA{colOurs, colBase} {
		n := 0
		for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
			for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
				if color.RGBAModel.Convert(img.At(x, y)) == c {
					n++
				}
			}
		}
		if n < 200 {
			t.Errorf("colour %v: %d pixels, want a curve", c, n)
		}
	}
	if err := writeCDFPlot(p, "x", nil); err == nil {
		t.Error("an empty plot should fail")
	}
	if err := writeCDFPlot(p, "x", []Series{{Label: "zeros", Ms: []float64{0, 0}}}); err == nil {
		t.Error("a plot of no positive latency should fail")
	}
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{nil, true},
		{[]string{"--only", "handoff,api"}, true},
		{[]string{"--only", "bogus"}, false},
		{[]string{"--scale-sizes", "10,x"}, false},
		{[]string{"--candidates", "1"}, false},
		{[]string{"--window", "2s"}, false},
	} {
		_, err := parseFlags(tc.args)
		if (err == nil) != tc.ok {
			t.Errorf("%v: err = %v", tc.args, err)
		}
	}
	o, err := parseFlags([]string{"--quick", "--trials", "7"})
	if err != nil {
		t.Fatal(err)
	}
	if o.trials != 7 || o.failoverTrials != 7 || o.footprintWait != 10*time.Second || len(o.scaleSizes) != 1 {
		t.Errorf("--quick with an explicit --trials: %+v", o)
	}
}
