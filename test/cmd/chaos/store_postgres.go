package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	pgfence "github.com/elector-sidecar/elector-sidecar/pkg/fencing/postgres"
	"github.com/elector-sidecar/elector-sidecar/test/framework/dbserver"
)

// openPostgres starts a throwaway PostgreSQL, runs the fence's migration and
// returns the fence's Store for one resource, over a few connections.
func openPostgres(ctx context.Context, dir string) (*backend, error) {
	srv, err := dbserver.StartPostgres(ctx, dbserver.Options{Dir: filepath.Join(dir, "postgres")})
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	// dbserver keeps synchronous_commit on (with it off, a commit is
	// acknowledged before its WAL is written, and a crash loses accepted fence
	// writes: the soak's history check catches exactly that). fsync is off: a
	// process crash keeps what was written, a machine crash is not part of the soak.
	store := newPGStore(srv.URL, chaosResource, "chaos-httpstore", 8)
	if err := store.migrate(ctx); err != nil {
		_ = srv.Stop()
		return nil, err
	}
	return &backend{
		kind:     storePostgres,
		name:     "PostgreSQL",
		describe: fmt.Sprintf("PostgreSQL fence (pkg/fencing/postgres, fence() in the commit's transaction) on %s, resource %q, history in elector_fence_history; synchronous_commit on, fsync off", srv.Addr, chaosResource),
		store:    store,
		restart:  restartServer(srv),
		history: func(ctx context.Context) ([]historyRow, error) {
			// SELECT id, token, lease_uid, holder FROM elector_fence_history WHERE resource = $1 ORDER BY id
			var entries []pgfence.Entry
			err := store.with(ctx, func(c *pgx.Conn) (err error) {
				entries, err = pgfence.New(c).History(ctx, chaosResource)
				return err
			})
			if err != nil {
				return nil, err
			}
			rows := make([]historyRow, len(entries))
			for i, e := range entries {
				rows[i] = historyRow{ID: strconv.FormatInt(e.ID, 10), Token: e.Token.Value, LeaseUID: e.Token.LeaseUID, Writer: e.Holder}
			}
			return rows, nil
		},
		close: func() {
			store.close()
			_ = srv.Stop()
		},
	}, nil
}

// pgStore is pkg/fencing/postgres's Store of one resource over a small set
// of pgx connections, each used by one call at a time. (pgxpool would do
// this, but its dependency is not in go.mod.) A connection that failed
// other than with a PostgreSQL error (a restart broke it) is closed and
// replaced on its next use.
type pgStore struct {
	url, resource, holder string
	conns                 chan *pgx.Conn // nil: connect on use
}

var _ fencing.Store = (*pgStore)(nil)

func newPGStore(url, resource, holder string, n int) *pgStore {
	p := &pgStore{url: url, resource: resource, holder: holder, conns: make(chan *pgx.Conn, n)}
	for i := 0; i < n; i++ {
		p.conns <- nil
	}
	return p
}

func (p *pgStore) with(ctx context.Context, fn func(c *pgx.Conn) error) error {
	var c *pgx.Conn
	select {
	case c = <-p.conns:
	case <-ctx.Done():
		return ctx.Err()
	}
	var err error
	if c == nil || c.IsClosed() {
		if c, err = pgx.Connect(ctx, p.url); err != nil {
			p.conns <- nil
			return fmt.Errorf("postgres: connect: %w", err)
		}
	}
	err = fn(c)
	var pgErr *pgconn.PgError
	if err != nil && !errors.As(err, &pgErr) && !errors.Is(err, fencing.ErrStaleToken) && !errors.Is(err, fencing.ErrConflict) {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = c.Close(cctx)
		cancel()
		c = nil
	}
	p.conns <- c
	return err
}

func (p *pgStore) migrate(ctx context.Context) error {
	return p.with(ctx, func(c *pgx.Conn) error { return pgfence.Migrate(ctx, c) })
}

// Load implements fencing.Store.
func (p *pgStore) Load(ctx context.Context) (tok fencing.Token, value []byte, version string, err error) {
	err = p.with(ctx, func(c *pgx.Conn) error {
		tok, value, version, err = pgfence.New(c).Store(p.resource, p.holder).Load(ctx)
		return err
	})
	return tok, value, version, err
}

// Commit implements fencing.Store.
func (p *pgStore) Commit(ctx context.Context, version string, tok fencing.Token, value []byte) error {
	return p.with(ctx, func(c *pgx.Conn) error {
		return pgfence.New(c).Store(p.resource, p.holder).Commit(ctx, version, tok, value)
	})
}

func (p *pgStore) close() {
	for i := 0; i < cap(p.conns); i++ {
		if c := <-p.conns; c != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = c.Close(ctx)
			cancel()
		}
	}
}
