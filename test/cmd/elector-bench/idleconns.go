package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/localapi"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// ---- 10. idle connections vs /token ----
//
// One leading sidecar. A separate client (idleClientConns keep-alive
// connections, open loop at --idle-rate) measures GET /token three ways,
// interleaved in each of --repeats rounds:
//
//	none       nothing else connected;
//	keep-alive --idle-conns connections that made one request each and then
//	           stay silent (the server holds them for IdleTimeout, 120 s);
//	silent     --idle-conns connections that never send a byte (the server
//	           holds them for ReadHeaderTimeout, 5 s; the run is shorter).
//
// After a silent run the bench waits for the server to close the silent
// connections and counts them, with when each closed (from its dial).

const (
	idleClientConns = 8
	// idleSettle passes between opening the idle connections and measuring.
	idleSettle = 500 * time.Millisecond
)

// idleSilentDuration is the length of a silent run: it ends at least a
// second before the server may cut the silent connections.
func idleSilentDuration(fixed time.Duration) time.Duration {
	return min(fixed, localapi.ReadHeaderTimeout-idleSettle-time.Second)
}

// Idle kinds (LoadResult.Target).
const (
	idleNone      = "none"
	idleKeepAlive = "keep-alive idle"
	idleSilent    = "silent"
)

// IdleConnsResult is section 10's data.
type IdleConnsResult struct {
	IdleConns   int          `json:"idleConns"`
	Rate        float64      `json:"rateRps"`
	ClientConns int          `json:"clientConns"`
	Runs        []LoadResult `json:"runs"`
	// Silent connections: how many the server closed within
	// ReadHeaderTimeout + 2 s, of how many opened, and when (from the dial).
	SilentOpened     int  `json:"silentOpened"`
	SilentClosed     int  `json:"silentClosed"`
	SilentCloseAfter Dist `json:"silentClosedAfter"`
	// Keep-alive idle connections the server closed during their run
	// (expected none: IdleTimeout is 120 s).
	KeepAliveOpened int `json:"keepAliveOpened"`
	KeepAliveClosed int `json:"keepAliveClosed"`
	// Sidecar RSS with nothing connected yet (before the first repeat) and
	// with the keep-alive idle connections open (the last repeat).
	RSSNone      int64 `json:"rssNoneBytes"`
	RSSKeepAlive int64 `json:"rssKeepAliveBytes"`
}

// watchedConn is one idle connection; closed is closed (and at set) when
// the server ends it.
type watchedConn struct {
	c      net.Conn
	dialed time.Time
	closed chan struct{}
	at     time.Time
}

// openIdle opens n connections to addr. With keepAlive each makes one
// request to path first (and reads the answer); then each waits silently
// for the server to close it.
func openIdle(addr, path string, n int, keepAlive bool) ([]*watchedConn, error) {
	out := make([]*watchedConn, 0, n)
	for i := 0; i < n; i++ {
		var (
			c   net.Conn
			err error
		)
		dialed := time.Now()
		if keepAlive {
			var r *rawConn
			if r, err = dialRaw(addr, path); err == nil {
				if _, err = r.do(); err != nil {
					r.close()
				}
				c = r.c
			}
		} else {
			c, err = net.DialTimeout("tcp", addr, 2*time.Second)
		}
		if err != nil {
			closeAll(out)
			return nil, fmt.Errorf("idle connection %d: %w", i+1, err)
		}
		w := &watchedConn{c: c, dialed: dialed, closed: make(chan struct{})}
		go func() {
			var b [1]byte
			_, _ = c.Read(b[:]) // the server never sends unasked: EOF or reset when it closes
			w.at = time.Now()
			close(w.closed)
		}()
		out = append(out, w)
	}
	return out, nil
}

func closeAll(ws []*watchedConn) {
	for _, w := range ws {
		_ = w.c.Close()
	}
	for _, w := range ws {
		<-w.closed
	}
}

// countClosed counts the connections already closed and their lifetimes.
func countClosed(ws []*watchedConn) (int, []time.Duration) {
	var ds []time.Duration
	for _, w := range ws {
		select {
		case <-w.closed:
			ds = append(ds, w.at.Sub(w.dialed))
		default:
		}
	}
	return len(ds), ds
}

func (e *env) runIdleConns(ctx context.Context, o *options) (*IdleConnsResult, error) {
	res := &IdleConnsResult{IdleConns: o.idleConns, Rate: o.idleRate, ClientConns: idleClientConns}
	p, _, err := e.startPool(ctx, sc, "bench-idleconns", framework.Timings{}, 1)
	if p != nil {
		defer p.stopAll()
	}
	if err != nil {
		return res, err
	}
	sidecar := p.members[0]
	addr := strings.TrimPrefix(sidecar.URL, "http://")
	if err := waitToken(ctx, sidecar, 10*time.Second); err != nil {
		return res, err
	}
	rss := func() int64 {
		st, err := procStatus(sidecar.Pid())
		if err != nil {
			return 0
		}
		return st["VmRSS"]
	}
	// A silent run must end before the server cuts the silent connections.
	silentDur := idleSilentDuration(o.fixedDur)
	measure := func(kind string, d time.Duration) error {
		lr, err := runLoad(ctx, kind, addr, "/token", idleClientConns, o.idleRate, d)
		if err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
		res.Runs = append(res.Runs, lr)
		e.progress("    %s: achieved %.0f req/s, p50 %s, p99 %s", kind, lr.RPS, fmtMs(lr.Latency.P50), fmtMs(lr.Latency.P99))
		return nil
	}
	var closedAfter []time.Duration
	for r := 0; r < o.repeats; r++ {
		if r == 0 {
			res.RSSNone = rss() // before any idle connection (Go keeps freed memory a while)
		}
		if err := measure(idleNone, o.fixedDur); err != nil {
			return res, err
		}

		ka, err := openIdle(addr, "/token", o.idleConns, true)
		if err != nil {
			return res, err
		}
		// Let the server settle with them (their goroutines and buffers, a GC).
		err = settle(ctx, idleSettle, 0)
		if err == nil {
			err = measure(idleKeepAlive, o.fixedDur)
		}
		res.RSSKeepAlive = rss()
		n, _ := countClosed(ka)
		res.KeepAliveOpened += len(ka)
		res.KeepAliveClosed += n
		closeAll(ka)
		if err != nil {
			return res, err
		}

		silent, err := openIdle(addr, "/token", o.idleConns, false)
		if err != nil {
			return res, err
		}
		err = settle(ctx, idleSettle, 0)
		if err == nil {
			err = measure(idleSilent, silentDur)
		}
		// Wait for the server to close them (ReadHeaderTimeout from each dial).
		if err == nil {
			err = settle(ctx, time.Until(silent[len(silent)-1].dialed.Add(localapi.ReadHeaderTimeout+2*time.Second)), 0)
		}
		n, ds := countClosed(silent)
		res.SilentOpened += len(silent)
		res.SilentClosed += n
		closedAfter = append(closedAfter, ds...)
		closeAll(silent)
		if err != nil {
			return res, err
		}
		e.progress("    silent connections closed by the server: %d of %d", n, len(silent))
	}
	res.SilentCloseAfter = NewDist(closedAfter, false)
	if len(res.Runs) == 0 {
		return res, errors.New("no runs")
	}
	return res, nil
}

func (r *IdleConnsResult) spread(kind string, f func(LoadResult) float64) Spread {
	var vs []float64
	for _, run := range r.Runs {
		if run.Target == kind {
			vs = append(vs, f(run))
		}
	}
	return NewSpread(vs)
}

func (r *IdleConnsResult) rows() []Row {
	p50 := func(l LoadResult) float64 { return l.Latency.P50 }
	p99 := func(l LoadResult) float64 { return l.Latency.P99 }
	rps := func(l LoadResult) float64 { return l.RPS }
	none50, none99, noneRPS := r.spread(idleNone, p50), r.spread(idleNone, p99), r.spread(idleNone, rps)
	if none99.N == 0 {
		return nil
	}
	var rows []Row
	for _, k := range []struct{ kind, label string }{
		{idleKeepAlive, fmt.Sprintf("%d keep-alive idle connections", r.IdleConns)},
		{idleSilent, fmt.Sprintf("%d silent connections (before ReadHeaderTimeout)", r.IdleConns)},
	} {
		s50, s99, sRPS := r.spread(k.kind, p50), r.spread(k.kind, p99), r.spread(k.kind, rps)
		if s99.N == 0 {
			continue
		}
		lat := Row{Metric: fmt.Sprintf("/token p99 at %.0f req/s, %s", r.Rate, k.label), Ours: fmtMsSpread(s99), Baseline: fmtMsSpread(none99),
			Ratio: ratio(s99.Median, none99.Median)}
		goalIdleP99.judge(&lat, s99.Median, none99.Median)
		achieved := Row{Metric: fmt.Sprintf("/token achieved req/s, %s", k.label), Ours: fmtRateSpread(sRPS), Baseline: fmtRateSpread(noneRPS), Ratio: ratio(sRPS.Median, noneRPS.Median)}
		goalIdleRate.judge(&achieved, sRPS.Min, r.Rate)
		rows = append(rows,
			lat,
			Row{Metric: fmt.Sprintf("/token p50, %s", k.label), Ours: fmtMsSpread(s50), Baseline: fmtMsSpread(none50), Ratio: ratio(s50.Median, none50.Median)},
			achieved,
		)
	}
	closed := Row{Metric: fmt.Sprintf("silent connections closed by the server (ReadHeaderTimeout %v), after (from dial) min–max", localapi.ReadHeaderTimeout),
		Ours: fmt.Sprintf("%d of %d", r.SilentClosed, r.SilentOpened), Baseline: "n/a", Ratio: "n/a"}
	d := r.SilentCloseAfter
	if d.N > 0 {
		closed.Ours += fmt.Sprintf(", %s–%s", fmtMs(d.Min), fmtMs(d.Max))
	}
	goalIdleClosed.judge(&closed, missedIf(d.N == 0 || r.SilentClosed != r.SilentOpened, d.Max), math.NaN())
	rows = append(rows, closed,
		Row{Metric: "keep-alive idle connections closed by the server during their run (IdleTimeout " + localapi.IdleTimeout.String() + ")",
			Ours: fmt.Sprintf("%d of %d", r.KeepAliveClosed, r.KeepAliveOpened), Baseline: "n/a", Ratio: "n/a"},
		Row{Metric: fmt.Sprintf("sidecar RSS, %d keep-alive idle connections open vs none", r.IdleConns),
			Ours: fmtMiB(float64(r.RSSKeepAlive)), Baseline: fmtMiB(float64(r.RSSNone)), Ratio: ratio(float64(r.RSSKeepAlive), float64(r.RSSNone))},
	)
	return rows
}
