package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	"github.com/elector-sidecar/elector-sidecar/pkg/fencing/httpstore"
	redisfence "github.com/elector-sidecar/elector-sidecar/pkg/fencing/redis"
	"github.com/elector-sidecar/elector-sidecar/test/framework/dbserver"
)

// The demo's fenced store (--store): by default ("embedded") the fenced HTTP
// store runs as its own process (`elector-demo store`, an in-memory fence).
// With postgres or redis, the demo starts a throwaway server
// (test/framework/dbserver) and serves the same HTTP store in the driver,
// fronting the project's fence in that database (pkg/fencing/postgres,
// pkg/fencing/redis); the writers are unchanged. At the end the demo reads
// the database's own history of accepted writes.
const (
	storeEmbedded = "embedded"
	storePostgres = "postgres"
	storeRedis    = "redis"
)

func parseStoreKind(s string) (string, error) {
	switch s {
	case "", storeEmbedded, "memory": // the embedded store is an in-memory fence
		return storeEmbedded, nil
	case storePostgres, storeRedis:
		return s, nil
	}
	return "", fmt.Errorf("--store %q: want %s (or memory), %s or %s", s, storeEmbedded, storePostgres, storeRedis)
}

// historyRow is one accepted write as the database recorded it.
type historyRow struct {
	ID     string
	Token  int64
	Writer string
}

// dbStore is a fence in a database.
type dbStore struct {
	name     string // PostgreSQL, Redis
	describe string
	// query is how the history is read, as an operator would type it.
	query   string
	store   fencing.Store
	history func(ctx context.Context) ([]historyRow, error)
	close   func()
}

// rejection is a stale write the HTTP store turned away.
type rejection struct {
	at      time.Time
	writer  string
	token   int64
	highest int64
}

// startDBStore starts the database, its fence, and the HTTP store in front.
func (d *demo) startDBStore(ctx context.Context) error {
	var err error
	dir := filepath.Join(d.logDir, d.storeKind)
	switch d.storeKind {
	case storePostgres:
		d.db, err = openPostgres(ctx, dir)
	case storeRedis:
		d.db, err = openRedis(ctx, dir)
	}
	if err != nil {
		return fmt.Errorf("%s fence: %w", d.storeKind, err)
	}
	srv := httpstore.NewServer(d.db.store)
	srv.OnWrite = func(w httpstore.Write) {
		if w.Stale {
			d.rejMu.Lock()
			d.rejections = append(d.rejections, rejection{at: w.At, writer: w.Writer, token: w.Token, highest: w.Highest})
			d.rejMu.Unlock()
		}
	}
	d.httpStore = srv
	d.storeURL, d.stopHTTP, err = httpstore.Listen("127.0.0.1:0", srv)
	if err != nil {
		d.db.close()
		d.db = nil
		return err
	}
	d.say("", "fenced store: %s", d.db.describe)
	return nil
}

func (d *demo) stopDBStore() {
	if d.stopHTTP != nil {
		d.stopHTTP()
		d.stopHTTP = nil
	}
	if d.db != nil {
		d.db.close()
		d.db = nil
	}
}

// showHistory prints the database's own record of the accepted writes,
// grouped by token, and where the rejected stale writes are not.
func (d *demo) showHistory(ctx context.Context) error {
	rows, err := d.db.history(ctx)
	if err != nil {
		return fmt.Errorf("reading %s's history: %w", d.db.name, err)
	}
	// The HTTP store numbers its commits 1, 2, ... in commit order; with
	// nothing lost, commit n is history row n, which names the pod when the
	// database recorded the HTTP store as the writer.
	byCommit := map[int64]string{}
	for _, w := range d.httpStore.Writes() {
		if w.Accepted {
			byCommit[w.Seq] = w.Writer
		}
	}
	d.step("%s's own record of the accepted writes: %s", d.db.name, d.db.query)
	type run struct {
		from, to int
		token    int64
		writers  []string
	}
	var runs []run
	for i, r := range rows {
		who := byCommit[int64(i+1)]
		if who == "" || len(byCommit) != len(rows) {
			who = r.Writer
		}
		if n := len(runs); n > 0 && runs[n-1].token == r.Token {
			runs[n-1].to = i + 1
			if !contains(runs[n-1].writers, who) {
				runs[n-1].writers = append(runs[n-1].writers, who)
			}
			continue
		}
		runs = append(runs, run{from: i + 1, to: i + 1, token: r.Token, writers: []string{who}})
	}
	d.outMu.Lock()
	for _, r := range runs {
		span := fmt.Sprintf("row %d", r.from)
		if r.to > r.from {
			span = fmt.Sprintf("rows %d–%d", r.from, r.to)
		}
		fmt.Fprintf(d.out, "          %-14s token %-3d written by %s\n", span, r.token, strings.Join(r.writers, ", "))
	}
	d.outMu.Unlock()
	down := 0
	for i := 1; i < len(rows); i++ {
		if rows[i].Token < rows[i-1].Token {
			down++
		}
	}
	if down == 0 {
		d.say(bold, "  %d rows; the token never goes down from one row to the next", len(rows))
	} else {
		d.say(bold+red, "  %d rows; the token goes down %d times: THIS IS A BUG", len(rows), down)
	}
	d.rejMu.Lock()
	rejs := append([]rejection(nil), d.rejections...)
	d.rejMu.Unlock()
	for i, rj := range rejs {
		if i == 3 {
			d.say(dim, "  ... and %d more rejected writes", len(rejs)-3)
			break
		}
		first := 0 // the first row with a higher token than the rejected one
		for j, r := range rows {
			if r.Token > rj.token {
				first = j + 1
				break
			}
		}
		where := "no row after it has a lower token"
		if first > 0 {
			where = fmt.Sprintf("from row %d on (token %d) every row carries a higher token", first, rows[first-1].Token)
		}
		d.say(bold+red, "  ✗ %s's write with token %d at %.1fs was rejected (%s held token %d): it has no row; %s",
			orDash(rj.writer), rj.token, rj.at.Sub(d.start).Seconds(), d.db.name, rj.highest, where)
	}
	if len(rejs) == 0 {
		d.say(dim, "  no write was rejected as stale in this run")
	}
	return nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// openRedis starts a throwaway redis-server with the Redis fence, created
// once here (it fails closed without its token key).
func openRedis(ctx context.Context, dir string) (*dbStore, error) {
	srv, err := dbserver.StartRedis(ctx, dbserver.Options{Dir: dir})
	if err != nil {
		return nil, err
	}
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	fence := redisfence.New(client, "demo", redisfence.WithWriter("demo-store"))
	if _, err := fence.Init(ctx); err != nil {
		_ = client.Close()
		_ = srv.Stop()
		return nil, err
	}
	k := fence.Keys()
	return &dbStore{
		name:     "Redis",
		describe: fmt.Sprintf("Redis at %s, pkg/fencing/redis (fence.lua checks the token and writes %s, %s and the history stream %s in one step)", srv.Addr, k.Token, k.Value, k.History),
		query:    "XRANGE " + k.History + " - +",
		store:    fence,
		history: func(ctx context.Context) ([]historyRow, error) {
			es, err := fence.History(ctx)
			if err != nil {
				return nil, err
			}
			rows := make([]historyRow, len(es))
			for i, e := range es {
				rows[i] = historyRow{ID: e.ID, Token: e.Token.Value, Writer: e.Writer}
			}
			return rows, nil
		},
		close: func() { _ = client.Close(); _ = srv.Stop() },
	}, nil
}
