// Command go-shard-worker is an example main container next to elector-sidecar
// run with --shards=N: with pkg/client's RunShards it runs one worker per
// shard its pod owns, and each worker runs jobs that each end in one row
// written to PostgreSQL through the fence of pkg/fencing/postgres, stamped
// with the shard's own fencing token. Shard i writes the resource
// <resource>-<i> ("partition-3"), so each partition has its own fence.
//
//	go-shard-worker [flags]
//
// Flags (each with an environment variable; the flag wins):
//
//	-sidecar   ELECTOR_URL       the sidecar's local API (default http://127.0.0.1:4040)
//	-postgres  DATABASE_URL      PostgreSQL URL (required)
//	-resource  WORKER_RESOURCE   prefix of the fenced resources: shard i writes <prefix>-<i> (default "partition")
//	-interval  WORKER_INTERVAL   pause between a shard's jobs (default 1s)
//	-work      WORKER_WORK       how long a job works between reading the token and writing (default 200ms)
//	-holder    POD_NAME          written in each row and in the fence's history (default the hostname)
//
// The tables come from pkg/fencing/postgres/migration.sql and
// examples/schema.sql. A shard's worker starts a job only while the sidecar
// lists the shard as owned (RunShards cancels the worker as soon as it does
// not) and GET /shards/{i}/token gives the same token, valid for longer than
// the job takes. A pause between that check and the write (a long GC,
// SIGSTOP, a frozen VM) can outlast the token anyway: then another pod owns
// the shard with a higher token, and PostgreSQL's elector_fence() rejects
// the late write (SQLSTATE EF001) and commits nothing. One log line per
// event:
//
//	go-shard-worker: shard 3 owned: token=7 resource=partition-3
//	go-shard-worker: shard 3 job 12 started: token=7 expiresInMs=14210
//	go-shard-worker: shard 3 job 12 committed: token=7
//	go-shard-worker: shard 3 job 15 rejected: SQLSTATE EF001, stale token (token=7 stored=8): nothing committed
//	go-shard-worker: shard 3 stopped: shard lost: shard 3 (token 7) is no longer owned, ...
//
// SIGTERM/SIGINT: running jobs are abandoned (nothing written), every shard
// still owned is given back (POST /release?shard=i: another pod takes it at
// once), a summary line, exit 0. Bad flags: exit 2. PostgreSQL unreachable
// at start: exit 1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/elector-sidecar/elector-sidecar/pkg/client"
	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	pgfence "github.com/elector-sidecar/elector-sidecar/pkg/fencing/postgres"
)

type config struct {
	sidecar, postgres, resource, holder string
	interval, work                      time.Duration
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	log.SetPrefix("go-shard-worker: ")
	log.SetOutput(os.Stdout)
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "go-shard-worker:", err, "(go-shard-worker -h lists the flags)")
		os.Exit(2)
	}
	if err := run(ctx, cfg); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	env := func(k, def string) string {
		if v := os.Getenv(k); v != "" {
			return v
		}
		return def
	}
	host, _ := os.Hostname()
	fs := flag.NewFlagSet("go-shard-worker", flag.ContinueOnError)
	var cfg config
	var interval, work string
	fs.StringVar(&cfg.sidecar, "sidecar", env("ELECTOR_URL", client.DefaultURL), "the sidecar's local API")
	fs.StringVar(&cfg.postgres, "postgres", env("DATABASE_URL", ""), "PostgreSQL URL (required)")
	fs.StringVar(&cfg.resource, "resource", env("WORKER_RESOURCE", "partition"), "prefix of the fenced resources: shard i writes <prefix>-<i>")
	fs.StringVar(&interval, "interval", env("WORKER_INTERVAL", "1s"), "pause between a shard's jobs")
	fs.StringVar(&work, "work", env("WORKER_WORK", "200ms"), "how long a job works before it writes")
	fs.StringVar(&cfg.holder, "holder", env("POD_NAME", host), "holder written in each row")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if cfg.interval, err = time.ParseDuration(interval); err != nil || cfg.interval <= 0 {
		return cfg, fmt.Errorf("-interval %q: want a positive duration such as 1s or 500ms", interval)
	}
	if cfg.work, err = time.ParseDuration(work); err != nil || cfg.work < 0 {
		return cfg, fmt.Errorf("-work %q: want a duration such as 200ms (0 for none)", work)
	}
	switch {
	case cfg.postgres == "":
		return cfg, errors.New("no PostgreSQL URL: set -postgres or DATABASE_URL")
	case cfg.resource == "":
		return cfg, errors.New("-resource must not be empty")
	case cfg.holder == "":
		return cfg, errors.New("-holder must not be empty (set POD_NAME)")
	}
	if _, err := client.New(cfg.sidecar); err != nil {
		return cfg, fmt.Errorf("-sidecar: %w", err)
	}
	return cfg, nil
}

type worker struct {
	cfg     config
	fence   *pgfence.Fence
	sidecar *client.Client

	jobs, committed, rejected atomic.Int64
	mu                        sync.Mutex
	owned                     map[int]bool // the shards a worker runs for now
}

func run(ctx context.Context, cfg config) error {
	pool, err := pgxpool.New(ctx, cfg.postgres)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	sidecar, err := client.New(cfg.sidecar, client.WithTimeout(2*time.Second), client.WithErrorHandler(func(err error) {
		log.Printf("following the sidecar: %v; reconnecting", err)
	}))
	if err != nil {
		return err
	}
	w := &worker{cfg: cfg, fence: pgfence.New(pool), sidecar: sidecar, owned: map[int]bool{}}
	log.Printf("started: holder=%s resources=%s-<i> sidecar=%s interval=%v work=%v", cfg.holder, cfg.resource, sidecar.URL(), cfg.interval, cfg.work)
	// RunShards returns once every shard's worker has: on SIGTERM, or at
	// once if the sidecar is not a shard set.
	err = sidecar.RunShards(ctx, func(sctx context.Context, shard client.ShardToken) { w.shard(ctx, sctx, shard) })
	if !errors.Is(err, context.Canceled) {
		return err
	}
	w.giveBack()
	log.Printf("stopped: %d jobs, %d rows committed, %d rejected as stale", w.jobs.Load(), w.committed.Load(), w.rejected.Load())
	return nil
}

// shard works one shard while the sidecar says this pod owns it with the
// token it started with (sctx, from RunShards); ctx is the process's.
func (w *worker) shard(ctx, sctx context.Context, shard client.ShardToken) {
	i := shard.Index
	w.setOwned(i, true)
	log.Printf("shard %d owned: token=%d resource=%s", i, shard.Token, w.resource(i))
	tick := time.NewTicker(w.cfg.interval)
	defer tick.Stop()
	for {
		select {
		case <-sctx.Done():
			if ctx.Err() == nil {
				w.setOwned(i, false)
				log.Printf("shard %d stopped: %v", i, context.Cause(sctx))
			}
			return
		case <-tick.C:
			w.job(ctx, sctx, shard)
		}
	}
}

// job asks GET /shards/{i}/token, works for cfg.work, then writes one row
// fenced with the shard's token. Once started, the work stops only on
// shutdown: a job whose shard moved meanwhile still writes, and the fence
// rejects it.
func (w *worker) job(ctx, sctx context.Context, shard client.ShardToken) {
	i := shard.Index
	t, err := w.sidecar.ShardToken(sctx, i)
	switch {
	case err != nil:
		log.Printf("shard %d: no job: %v", i, err)
		return
	case t.Token != shard.Token || t.LeaseUID != shard.LeaseUID:
		log.Printf("shard %d: no job: the shard's token is now %d, this worker's %d", i, t.Token, shard.Token)
		return
	case time.Duration(t.ExpiresInMs)*time.Millisecond <= w.cfg.work:
		log.Printf("shard %d: no job: token %d expires in %dms, the job takes %v", i, t.Token, t.ExpiresInMs, w.cfg.work)
		return
	}
	n := w.jobs.Add(1)
	log.Printf("shard %d job %d started: token=%d expiresInMs=%d", i, n, t.Token, t.ExpiresInMs)
	select { // the work; a pause here can outlast the token
	case <-ctx.Done():
		log.Printf("shard %d job %d abandoned: stopping", i, n)
		return
	case <-time.After(w.cfg.work):
	}
	resource := w.resource(i)
	err = w.fence.Do(ctx, resource, t.Fencing(), w.cfg.holder, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO example_writes (resource, token, holder) VALUES ($1, $2, $3)", resource, t.Token, w.cfg.holder)
		return err
	})
	var stale *fencing.StaleTokenError
	switch {
	case errors.As(err, &stale):
		w.rejected.Add(1)
		log.Printf("shard %d job %d rejected: SQLSTATE %s, stale token (token=%d stored=%d): nothing committed",
			i, n, pgfence.CodeStaleToken, stale.Token, stale.Highest)
	case err != nil:
		log.Printf("shard %d job %d failed: token=%d: %v", i, n, t.Token, err)
	default:
		w.committed.Add(1)
		log.Printf("shard %d job %d committed: token=%d", i, n, t.Token)
	}
}

func (w *worker) resource(i int) string { return w.cfg.resource + "-" + strconv.Itoa(i) }

func (w *worker) setOwned(i int, owned bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if owned {
		w.owned[i] = true
	} else {
		delete(w.owned, i)
	}
}

// giveBack releases every shard a worker ran for at shutdown, so another
// pod takes it at once instead of after the session runs out.
func (w *worker) giveBack() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.owned {
		switch err := w.sidecar.ReleaseShard(ctx, i); {
		case err == nil:
			log.Printf("shard %d given back", i)
		case !errors.Is(err, client.ErrNotShardOwner): // one that moved meanwhile is not ours to give
			log.Printf("shard %d: giving it back: %v", i, err)
		}
	}
}
