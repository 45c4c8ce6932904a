package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	redisfence "github.com/elector-sidecar/elector-sidecar/pkg/fencing/redis"
	"github.com/elector-sidecar/elector-sidecar/test/framework/dbserver"
)

// ---- 7. fence ----
//
// The cost of fencing a write at the resource, on the same server in one
// run: N concurrent writers for a fixed time, each writing as fast as it can
// (closed loop) with one token (a leader writes many times with its token,
// so every fenced write is accepted). Fenced and plain runs are interleaved,
// repeats times, so drift in the machine's load hits both alike.
//
//   - postgres: the Go helper of pkg/fencing/postgres, which checks the token
//     (the elector_fence() SQL function, sent with the caller's first
//     statement) and runs the caller's function in the same transaction,
//     writing one row of user data; against the same transaction (BEGIN, the
//     same INSERT, COMMIT) without the fence (the goals' baseline), and
//     against it with BEGIN and the INSERT in one batch, the round trips Do
//     makes (the fence's own cost, no goal).
//   - redis: the fence's Lua script (Fence.Set: check, raise, SET, XADD to
//     the history) against a plain SET of the same value.

// FenceRun is one measured run.
type FenceRun struct {
	DB      string  `json:"db"`
	Variant string  `json:"variant"` // "fenced" or "plain"
	Writers int     `json:"writers"`
	Seconds float64 `json:"seconds"`
	Writes  int64   `json:"writes"`
	Errors  int64   `json:"errors"`
	// FirstError is the first error seen (a run with errors is reported, not hidden).
	FirstError string  `json:"firstError,omitempty"`
	PerSecond  float64 `json:"writesPerSecond"`
	Latency    Dist    `json:"latency"`
}

// FenceResult is section 7's data.
type FenceResult struct {
	Writers  int        `json:"writers"`
	Duration float64    `json:"runSeconds"`
	Repeats  int        `json:"repeats"`
	Servers  []string   `json:"servers"`
	Runs     []FenceRun `json:"runs"`
}

// fenceTarget is one database's pair of write paths.
type fenceTarget struct {
	db     string
	fenced func(ctx context.Context, writer, i int) error
	plain  func(ctx context.Context, writer, i int) error
	// plainBatched, if set, is plain with the round trips of fenced (the
	// fence's own cost; no goal).
	plainBatched func(ctx context.Context, writer, i int) error
	close        func()
}

// variantPlainBatched is the run of fenceTarget.plainBatched.
const variantPlainBatched = "plain-batched"

// variants are t's write paths in the order each repeat runs them.
func (t *fenceTarget) variants() []fenceVariant {
	vs := []fenceVariant{{"fenced", t.fenced}, {"plain", t.plain}}
	if t.plainBatched != nil {
		vs = append(vs, fenceVariant{variantPlainBatched, t.plainBatched})
	}
	return vs
}

type fenceVariant struct {
	name string
	f    func(context.Context, int, int) error
}

// fenceDBs are the section's targets: PostgreSQL with the fence's defaults
// (the goals are judged on it), PostgreSQL without the history rows
// (elector_fence_settings.history = false: what the option saves), Redis.
var fenceDBs = []string{"postgres", pgNoHistory, "redis"}

// pgNoHistory is PostgreSQL with the fence's history off.
const pgNoHistory = "postgres-no-history"

// benchToken is the token every fenced write carries: the same leader's.
var benchToken = fencing.Token{Value: 1, LeaseUID: "bench-lease-uid"}

func (e *env) runFence(ctx context.Context, o *options) (*FenceResult, error) {
	res := &FenceResult{Writers: o.fenceWriters, Duration: o.fenceDuration.Seconds(), Repeats: o.repeats}
	dir := filepath.Join(e.logDir, "fence")
	var errs []error // one database failing does not stop the other's runs
	for _, db := range fenceDBs {
		var t *fenceTarget
		var desc string
		var err error
		switch db {
		case "postgres":
			t, desc, err = startPostgresTarget(ctx, dir, o.fenceWriters, true)
		case pgNoHistory:
			t, desc, err = startPostgresTarget(ctx, dir, o.fenceWriters, false)
		case "redis":
			t, desc, err = startRedisTarget(ctx, dir)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", db, err))
			continue
		}
		res.Servers = append(res.Servers, desc)
		e.progress("    %s", desc)
		err = func() error {
			defer t.close()
			// Warm up both paths (connections, prepared statements, the
			// script cache) before the first measured run.
			for _, v := range t.variants() {
				if _, err := measureWriters(ctx, db, "warm-up", o.fenceWriters, time.Second, v.f); err != nil {
					return err
				}
			}
			for _, n := range res.writerCounts() {
				for r := 0; r < o.repeats; r++ {
					for _, v := range t.variants() {
						run, err := measureWriters(ctx, db, v.name, n, o.fenceDuration, v.f)
						if err != nil {
							return err
						}
						res.Runs = append(res.Runs, run)
						e.progress("    %s %s, %d writers: %.0f writes/s, p50 %s, p99 %s, errors %d", db, v.name, n, run.PerSecond, fmtMs(run.Latency.P50), fmtMs(run.Latency.P99), run.Errors)
					}
				}
			}
			return nil
		}()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", db, err))
		}
		if ctx.Err() != nil {
			break
		}
	}
	return res, errors.Join(errs...)
}

// writerCounts: N concurrent writers of one resource with one token (a
// leader's concurrent writes), then one writer (the cost of the fence
// itself, without waiting for each other).
func (r *FenceResult) writerCounts() []int {
	if r.Writers == 1 {
		return []int{1}
	}
	return []int{r.Writers, 1}
}

// measureWriters runs n writers calling f as fast as they can for d and
// records every call's latency. Errors are counted; a run where every call
// failed is an error.
func measureWriters(ctx context.Context, db, variant string, n int, d time.Duration, f func(ctx context.Context, writer, i int) error) (FenceRun, error) {
	run := FenceRun{DB: db, Variant: variant, Writers: n}
	var wg sync.WaitGroup
	var errs atomic.Int64
	var firstErr sync.Once
	lat := make([][]time.Duration, n)
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			ls := make([]time.Duration, 0, 4096)
			for i := 0; rctx.Err() == nil; i++ {
				t0 := time.Now()
				// The call itself is not cut off by the end of the run.
				cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
				err := f(cctx, w, i)
				ccancel()
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					errs.Add(1)
					firstErr.Do(func() { run.FirstError = err.Error() })
					continue
				}
				ls = append(ls, time.Since(t0))
			}
			lat[w] = ls
		}(w)
	}
	wg.Wait()
	run.Seconds = time.Since(start).Seconds()
	var all []time.Duration
	for _, ls := range lat {
		all = append(all, ls...)
	}
	run.Writes, run.Errors = int64(len(all)), errs.Load()
	run.PerSecond = float64(run.Writes) / run.Seconds
	run.Latency = NewDist(all, false)
	if ctx.Err() != nil {
		return run, ctx.Err()
	}
	if run.Writes == 0 {
		return run, fmt.Errorf("%s %s: no write succeeded: %s", db, variant, run.FirstError)
	}
	return run, nil
}

func startRedisTarget(ctx context.Context, dir string) (*fenceTarget, string, error) {
	srv, err := dbserver.StartRedis(ctx, dbserver.Options{Dir: filepath.Join(dir, "redis")})
	if err != nil {
		return nil, "", err
	}
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr, PoolSize: 32})
	fence := redisfence.New(client, "bench")
	closeAll := func() { _ = client.Close(); _ = srv.Stop() }
	if _, err := fence.Init(ctx); err != nil {
		closeAll()
		return nil, "", err
	}
	version := "redis"
	if info, err := client.Info(ctx, "server").Result(); err == nil {
		version += " " + infoField(info, "redis_version")
	}
	if m, err := client.ConfigGet(ctx, "append*").Result(); err == nil {
		version += ", appendonly " + m["appendonly"] + ", appendfsync " + m["appendfsync"]
	}
	value := []byte("a value of about the size of a small record, 64 bytes long......")
	plainKey := "bench-plain"
	return &fenceTarget{
		db: "redis",
		fenced: func(ctx context.Context, w, _ int) error {
			err := fence.Set(ctx, benchToken, fmt.Sprintf("writer-%d", w), value)
			if errors.Is(err, fencing.ErrStaleToken) {
				return fmt.Errorf("the bench's own token was rejected: %w", err)
			}
			return err
		},
		plain: func(ctx context.Context, _, _ int) error {
			return client.Set(ctx, plainKey, value, 0).Err()
		},
		close: closeAll,
	}, fmt.Sprintf("redis-server at %s (%s); fenced = Fence.Set (EVALSHA fence.lua: check, HSET, SET, XADD), plain = SET", srv.Addr, version), nil
}

func infoField(info, key string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimRight(l, "\r"), key+":"); ok {
			return v
		}
	}
	return ""
}

// fenceRows: per database, fenced vs plain (median of the repeats and their
// min–max), the throughput ratio and the p99 delta, against the goals.
func (r *FenceResult) rows() []Row {
	var rows []Row
	for _, db := range fenceDBs {
		for _, n := range r.writerCounts() {
			rows = append(rows, r.dbRows(db, n)...)
		}
	}
	return rows
}

func (r *FenceResult) dbRows(db string, n int) []Row {
	var rows []Row
	get := func(variant string, f func(FenceRun) float64) Spread {
		var vs []float64
		for _, run := range r.Runs {
			if run.DB == db && run.Variant == variant && run.Writers == n {
				vs = append(vs, f(run))
			}
		}
		return NewSpread(vs)
	}
	rps := func(x FenceRun) float64 { return x.PerSecond }
	p50 := func(x FenceRun) float64 { return x.Latency.P50 }
	p99 := func(x FenceRun) float64 { return x.Latency.P99 }
	errs := func(x FenceRun) float64 { return float64(x.Errors) }
	fr, pr := get("fenced", rps), get("plain", rps)
	if fr.N == 0 || pr.N == 0 {
		return nil
	}
	f50, p50s := get("fenced", p50), get("plain", p50)
	f99, p99s := get("fenced", p99), get("plain", p99)
	fe, pe := get("fenced", errs), get("plain", errs)
	what := map[string]string{"postgres": "elector_fence() + INSERT in one transaction", pgNoHistory: "the same, elector_fence_settings.history = false", "redis": "fence.lua"}[db]
	base := map[string]string{"postgres": "the same transaction without elector_fence()", pgNoHistory: "the same transaction without elector_fence()", "redis": "plain SET"}[db]
	delta := f99.Median - p99s.Median
	who := fmt.Sprintf("%d writers", n)
	if n == 1 {
		who = "1 writer"
	}
	thr := Row{Metric: fmt.Sprintf("%s, %s: writes/s, %s (baseline: %s) (median; min–max)", db, who, what, base),
		Ours: fmtRateSpread(fr), Baseline: fmtRateSpread(pr), Ratio: ratio(fr.Median, pr.Median)}
	lat50 := Row{Metric: fmt.Sprintf("%s, %s: p50 latency of one write", db, who), Ours: fmtMsSpread(f50), Baseline: fmtMsSpread(p50s), Ratio: ratio(f50.Median, p50s.Median)}
	lat99 := Row{Metric: fmt.Sprintf("%s, %s: p99 latency of one write (fenced − plain = %s)", db, who, fmtMs(delta)), Ours: fmtMsSpread(f99), Baseline: fmtMsSpread(p99s), Ratio: ratio(f99.Median, p99s.Median)}
	if db == "postgres" {
		goalFenceThroughput.judge(&thr, fr.Median, pr.Median)
		goalFenceP99.judge(&lat99, f99.Median, p99s.Median)
	}
	rows = append(rows, thr, lat50, lat99)
	if br := get(variantPlainBatched, rps); br.N > 0 {
		b99 := get(variantPlainBatched, p99)
		rows = append(rows,
			Row{Metric: fmt.Sprintf("%s, %s: writes/s, the fence's own cost (baseline: the same transaction with its BEGIN sent with the INSERT, as Do sends it with the check: the same round trips) (median; min–max)", db, who),
				Ours: fmtRateSpread(fr), Baseline: fmtRateSpread(br), Ratio: ratio(fr.Median, br.Median)},
			Row{Metric: fmt.Sprintf("%s, %s: p99 latency of one write against that baseline (fenced − batched plain = %s)", db, who, fmtMs(f99.Median-b99.Median)),
				Ours: fmtMsSpread(f99), Baseline: fmtMsSpread(b99), Ratio: ratio(f99.Median, b99.Median)})
	}
	if fe.Max > 0 || pe.Max > 0 {
		rows = append(rows, Row{Metric: fmt.Sprintf("%s, %s: failed writes per run (max)", db, who), Ours: fmtNum(fe.Max), Baseline: fmtNum(pe.Max)})
	}
	return rows
}
