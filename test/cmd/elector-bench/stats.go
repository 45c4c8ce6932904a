package main

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// Dist summarises a sample of durations (milliseconds in JSON).
type Dist struct {
	N      int       `json:"n"`
	Min    float64   `json:"minMs"`
	P25    float64   `json:"p25Ms"`
	P50    float64   `json:"p50Ms"`
	P75    float64   `json:"p75Ms"`
	P95    float64   `json:"p95Ms"`
	P99    float64   `json:"p99Ms"`
	Max    float64   `json:"maxMs"`
	Mean   float64   `json:"meanMs"`
	StdDev float64   `json:"stdDevMs"`
	Raw    []float64 `json:"rawMs,omitempty"`
}

// NewDist summarises ds; keepRaw stores every sample (for plots and reanalysis).
func NewDist(ds []time.Duration, keepRaw bool) Dist {
	ms := make([]float64, len(ds))
	for i, d := range ds {
		ms[i] = float64(d) / float64(time.Millisecond)
	}
	return newDistMs(ms, keepRaw)
}

func newDistMs(ms []float64, keepRaw bool) Dist {
	d := Dist{N: len(ms)}
	if len(ms) == 0 {
		return d
	}
	s := append([]float64(nil), ms...)
	sort.Float64s(s)
	d.Min, d.Max = s[0], s[len(s)-1]
	d.P25, d.P50, d.P75 = quantile(s, 0.25), quantile(s, 0.50), quantile(s, 0.75)
	d.P95, d.P99 = quantile(s, 0.95), quantile(s, 0.99)
	var sum float64
	for _, v := range s {
		sum += v
	}
	d.Mean = sum / float64(len(s))
	if len(s) > 1 {
		var sq float64
		for _, v := range s {
			sq += (v - d.Mean) * (v - d.Mean)
		}
		d.StdDev = math.Sqrt(sq / float64(len(s)-1))
	}
	if keepRaw {
		d.Raw = ms
	}
	return d
}

// quantile is the nearest-rank quantile of sorted s (q in (0,1]): the
// smallest sample with at least q of the samples at or below it. With 30
// samples p99 is the maximum; the tables say n.
func quantile(s []float64, q float64) float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	r := int(math.Ceil(q*float64(len(s)))) - 1
	r = max(0, min(r, len(s)-1))
	return s[r]
}

// Spread summarises repeated measurements of one rate or size.
type Spread struct {
	N      int       `json:"n"`
	Median float64   `json:"median"`
	Mean   float64   `json:"mean"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Values []float64 `json:"values"`
}

// NewSpread summarises vs.
func NewSpread(vs []float64) Spread {
	sp := Spread{N: len(vs), Values: vs}
	if len(vs) == 0 {
		return sp
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	sp.Min, sp.Max = s[0], s[len(s)-1]
	if len(s)%2 == 1 {
		sp.Median = s[len(s)/2]
	} else {
		sp.Median = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	var sum float64
	for _, v := range s {
		sum += v
	}
	sp.Mean = sum / float64(len(s))
	return sp
}

// fmtMs prints milliseconds with a precision that suits the magnitude.
func fmtMs(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case math.Abs(v) >= 1000:
		return fmt.Sprintf("%.2f s", v/1000)
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f ms", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f ms", v)
	case math.Abs(v) >= 1:
		return fmt.Sprintf("%.2f ms", v)
	default:
		return fmt.Sprintf("%.0f µs", v*1000)
	}
}

// fmtNum prints a plain number with about three significant digits.
func fmtNum(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case v == 0:
		return "0"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	case math.Abs(v) >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

func fmtMiB(bytes float64) string { return fmt.Sprintf("%.1f MiB", bytes/(1<<20)) }
