package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	pgfence "github.com/elector-sidecar/elector-sidecar/pkg/fencing/postgres"
	"github.com/elector-sidecar/elector-sidecar/test/framework/dbserver"
)

// demoResource is the fenced resource's name in the database.
const demoResource = "demo"

// openPostgres starts a throwaway PostgreSQL, runs the fence's migration
// (once, here, at setup) and returns the fence's Store for one resource.
func openPostgres(ctx context.Context, dir string) (*dbStore, error) {
	srv, err := dbserver.StartPostgres(ctx, dbserver.Options{Dir: dir})
	if err != nil {
		return nil, err
	}
	// dbserver keeps synchronous_commit on: an accepted fence write is never
	// acknowledged before its WAL is written.
	store := newPGStore(srv.URL, demoResource, "demo-store", 4)
	if err := store.with(ctx, func(c *pgx.Conn) error { return pgfence.Migrate(ctx, c) }); err != nil {
		_ = srv.Stop()
		return nil, err
	}
	query := "SELECT id, token, lease_uid, holder, committed_at FROM elector_fence_history WHERE resource = 'demo' ORDER BY id"
	return &dbStore{
		name:     "PostgreSQL",
		describe: fmt.Sprintf("PostgreSQL at %s, pkg/fencing/postgres (each commit runs fence('demo', token, lease_uid, holder) and writes the value in one transaction; every accepted write adds a row to elector_fence_history)", srv.Addr),
		query:    query,
		store:    store,
		history: func(ctx context.Context) ([]historyRow, error) {
			var entries []pgfence.Entry
			err := store.with(ctx, func(c *pgx.Conn) (err error) {
				entries, err = pgfence.New(c).History(ctx, demoResource)
				return err
			})
			if err != nil {
				return nil, err
			}
			rows := make([]historyRow, len(entries))
			for i, e := range entries {
				rows[i] = historyRow{ID: strconv.FormatInt(e.ID, 10), Token: e.Token.Value, Writer: e.Holder}
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
