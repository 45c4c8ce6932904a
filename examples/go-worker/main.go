// Command go-worker is an example main container next to elector-sidecar: it
// follows the sidecar's GET /watch stream (with pkg/client, which reconnects
// and, on a sidecar without /watch, long-polls GET /leader instead), and
// while its pod leads it runs jobs that each end in one row written to
// PostgreSQL through the fence of pkg/fencing/postgres, stamped with the
// fencing token the job started with.
//
//	go-worker [flags]
//
// Flags (each with an environment variable; the flag wins):
//
//	-sidecar   ELECTOR_URL       the sidecar's local API (default http://127.0.0.1:4040)
//	-postgres  DATABASE_URL      PostgreSQL URL (required)
//	-resource  WORKER_RESOURCE   fenced resource name, also written in each row (default "example")
//	-interval  WORKER_INTERVAL   how often a job starts (default 1s)
//	-work      WORKER_WORK       how long a job works between reading the token and writing (default 200ms)
//	-holder    POD_NAME          written in each row and in the fence's history (default the hostname)
//	-setup     WORKER_SETUP      create the fence (pkg/fencing/postgres's migration) and the
//	                             example_writes table at start (default true)
//	-health-listen WORKER_HEALTH_LISTEN  serve GET /healthz here (200 while PostgreSQL answers, else 503),
//	                             e.g. 127.0.0.1:8080, for the sidecar's --app-health-url (default off)
//
// A job starts only while the sidecar says this pod leads and GET /token
// gives a token valid for longer than the job takes. A process pause (a long
// GC, SIGSTOP, a frozen VM) can still outlast the Lease between that check
// and the write: then another pod leads with a higher token, and PostgreSQL's
// elector_fence() rejects the late write (SQLSTATE EF001) and commits nothing. One
// log line per event:
//
//	go-worker: job 7 started: token=3 expiresInMs=2650
//	go-worker: job 7 committed: token=3
//	go-worker: job 9 rejected: SQLSTATE EF001, stale token (token=3 stored=4): nothing committed
//
// SIGTERM/SIGINT: a running job is abandoned (nothing written), then exit 0
// with a summary line. Bad flags: exit 2. PostgreSQL unreachable at start: exit 1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/elector-sidecar/elector-sidecar/pkg/client"
	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	pgfence "github.com/elector-sidecar/elector-sidecar/pkg/fencing/postgres"
	"github.com/elector-sidecar/elector-sidecar/pkg/localapi"
)

// Schema is the example's own table, created with -setup (examples/schema.sql is the same).
const Schema = `CREATE TABLE IF NOT EXISTS example_writes (
    id         bigserial PRIMARY KEY,
    resource   text NOT NULL,
    token      bigint NOT NULL,
    holder     text NOT NULL,
    written_at timestamptz NOT NULL DEFAULT clock_timestamp()
)`

type config struct {
	sidecar, postgres, resource, holder, healthListen string
	interval, work                                    time.Duration
	setup                                             bool
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	log.SetPrefix("go-worker: ")
	log.SetOutput(os.Stdout)
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "go-worker:", err)
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
	fs := flag.NewFlagSet("go-worker", flag.ContinueOnError)
	var cfg config
	var interval, work, setup string
	fs.StringVar(&cfg.sidecar, "sidecar", env("ELECTOR_URL", "http://127.0.0.1:4040"), "the sidecar's local API")
	fs.StringVar(&cfg.postgres, "postgres", env("DATABASE_URL", ""), "PostgreSQL URL (required)")
	fs.StringVar(&cfg.resource, "resource", env("WORKER_RESOURCE", "example"), "fenced resource name")
	fs.StringVar(&interval, "interval", env("WORKER_INTERVAL", "1s"), "how often a job starts")
	fs.StringVar(&work, "work", env("WORKER_WORK", "200ms"), "how long a job works before it writes")
	fs.StringVar(&cfg.holder, "holder", env("POD_NAME", host), "holder written in each row")
	fs.StringVar(&setup, "setup", env("WORKER_SETUP", "true"), "create the fence and the table at start")
	fs.StringVar(&cfg.healthListen, "health-listen", env("WORKER_HEALTH_LISTEN", ""), "serve GET /healthz here")
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
	if cfg.setup, err = strconv.ParseBool(setup); err != nil {
		return cfg, fmt.Errorf("-setup %q: want true or false", setup)
	}
	switch {
	case cfg.postgres == "":
		return cfg, errors.New("no PostgreSQL URL: set -postgres or DATABASE_URL")
	case cfg.resource == "":
		return cfg, errors.New("-resource must not be empty")
	case cfg.holder == "":
		return cfg, errors.New("-holder must not be empty (set POD_NAME)")
	}
	c, err := client.New(cfg.sidecar)
	if err != nil {
		return cfg, fmt.Errorf("-sidecar: %w", err)
	}
	cfg.sidecar = c.URL()
	return cfg, nil
}

func run(ctx context.Context, cfg config) error {
	pool, err := pgxpool.New(ctx, cfg.postgres)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer pool.Close()
	if cfg.setup {
		if err := pgfence.Migrate(ctx, pool); err != nil {
			return err
		}
		// Under a lock: concurrent CREATE TABLE IF NOT EXISTS of one name can fail.
		err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('example_writes')); "+Schema)
			return err
		})
		if err != nil {
			return fmt.Errorf("create example_writes: %w", err)
		}
	}
	if cfg.healthListen != "" {
		go serveHealth(ctx, cfg.healthListen, pool)
	}
	sidecar, err := client.New(cfg.sidecar, client.WithTimeout(2*time.Second), client.WithErrorHandler(func(err error) {
		if errors.Is(err, client.ErrNoWatch) {
			log.Printf("no /watch on %s: long-polling GET /leader", cfg.sidecar)
			return
		}
		log.Printf("following the sidecar: %v; reconnecting", err)
	}))
	if err != nil {
		return err
	}
	w := &worker{cfg: cfg, fence: pgfence.New(pool), sidecar: sidecar}
	w.leading.Store(true) // until the sidecar says otherwise (every job asks /token anyway)
	go w.follow(ctx)
	log.Printf("started: holder=%s resource=%s sidecar=%s interval=%v work=%v", cfg.holder, cfg.resource, cfg.sidecar, cfg.interval, cfg.work)
	tick := time.NewTicker(cfg.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			log.Printf("stopped: %d rows committed, %d rejected as stale", w.committed, w.rejected)
			return nil
		case <-tick.C:
			if w.leading.Load() {
				w.job(ctx)
			}
		}
	}
}

type worker struct {
	cfg     config
	fence   *pgfence.Fence
	sidecar *client.Client
	leading atomic.Bool // the sidecar's last word: this pod leads
	heard   bool        // follow's own: a state has arrived

	jobs, committed, rejected int
}

// job asks /token, works for cfg.work, then writes one row fenced with the
// token it started with.
func (w *worker) job(ctx context.Context) {
	t, err := w.sidecar.Token(ctx)
	if err != nil {
		log.Printf("no job: %v", err)
		return
	}
	if time.Duration(t.ExpiresInMs)*time.Millisecond <= w.cfg.work {
		log.Printf("no job: token %d expires in %dms, the job takes %v", t.Token, t.ExpiresInMs, w.cfg.work)
		return
	}
	w.jobs++
	n := w.jobs
	log.Printf("job %d started: token=%d expiresInMs=%d", n, t.Token, t.ExpiresInMs)
	select { // the work; a pause here can outlast the token
	case <-ctx.Done():
		log.Printf("job %d abandoned: stopping", n)
		return
	case <-time.After(w.cfg.work):
	}
	tok := t.Fencing()
	err = w.fence.Do(ctx, w.cfg.resource, tok, w.cfg.holder, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO example_writes (resource, token, holder) VALUES ($1, $2, $3)", w.cfg.resource, t.Token, w.cfg.holder)
		return err
	})
	var stale *fencing.StaleTokenError
	switch {
	case errors.As(err, &stale):
		w.rejected++
		log.Printf("job %d rejected: SQLSTATE %s, stale token (token=%d stored=%d): nothing committed",
			n, pgfence.CodeStaleToken, stale.Token, stale.Highest)
	case err != nil:
		log.Printf("job %d failed: token=%d: %v", n, t.Token, err)
	default:
		w.committed++
		log.Printf("job %d committed: token=%d", n, t.Token)
	}
}

// follow keeps w.leading up to date from the sidecar (GET /watch; pkg/client
// reconnects with Last-Event-ID, and long-polls a sidecar without /watch).
// Watch gives only the newest state, and an unknown state (not leading) once
// the last isLeader:true's expiresInMs has run out with no word from the
// sidecar, so w.leading is never true past what the sidecar vouched for.
func (w *worker) follow(ctx context.Context) {
	_ = w.sidecar.Watch(ctx, func(st localapi.LeaderResponse) {
		if was := w.leading.Swap(st.IsLeader); was != st.IsLeader || !w.heard {
			w.heard = true
			switch {
			case st.IsLeader:
				log.Printf("leading: token=%d", st.Token)
			case client.IsUnknown(st):
				log.Printf("not leading: the sidecar has not vouched for the term in time")
			default:
				log.Printf("not leading: holder=%q", st.Holder)
			}
		}
	})
}

// serveHealth answers GET /healthz: 200 while PostgreSQL answers a ping, else 503.
func serveHealth(ctx context.Context, addr string, pool *pgxpool.Pool) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, r *http.Request) {
		pctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		if err := pool.Ping(pctx); err != nil {
			http.Error(rw, "postgres: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(rw, "ok\n")
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Printf("health endpoint %s: %v", addr, err)
	}
}
