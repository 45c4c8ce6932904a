// Package pgstore is pkg/fencing/postgres's fencing.Store of one resource
// over a small set of pgx connections, for the harness programs that put the
// fence in a throwaway PostgreSQL (test/cmd/demo, test/cmd/chaos).
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	pgfence "github.com/elector-sidecar/elector-sidecar/pkg/fencing/postgres"
)

// Store is the fence's Store of one resource over n pgx connections, each
// used by one call at a time. (pgxpool would do this, but its dependency is
// not in go.mod.) A connection that failed other than with a PostgreSQL error
// or a fence rejection (a server restart broke it) is closed and replaced on
// its next use.
type Store struct {
	url, resource, holder string
	conns                 chan *pgx.Conn // nil: connect on use
}

var _ fencing.Store = (*Store)(nil)

// New returns a Store of resource at url whose commits record holder, over at
// most n connections (opened on first use).
func New(url, resource, holder string, n int) *Store {
	p := &Store{url: url, resource: resource, holder: holder, conns: make(chan *pgx.Conn, n)}
	for i := 0; i < n; i++ {
		p.conns <- nil
	}
	return p
}

// With runs fn on one of the connections.
func (p *Store) With(ctx context.Context, fn func(c *pgx.Conn) error) error {
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

// Migrate runs the fence's migration (pgfence.Migrate).
func (p *Store) Migrate(ctx context.Context) error {
	return p.With(ctx, func(c *pgx.Conn) error { return pgfence.Migrate(ctx, c) })
}

// History is the resource's accepted writes, oldest first (pgfence's
// elector_fence_history).
func (p *Store) History(ctx context.Context) ([]pgfence.Entry, error) {
	var entries []pgfence.Entry
	err := p.With(ctx, func(c *pgx.Conn) (err error) {
		entries, err = pgfence.New(c).History(ctx, p.resource)
		return err
	})
	return entries, err
}

// Load implements fencing.Store.
func (p *Store) Load(ctx context.Context) (tok fencing.Token, value []byte, version string, err error) {
	err = p.With(ctx, func(c *pgx.Conn) error {
		tok, value, version, err = pgfence.New(c).Store(p.resource, p.holder).Load(ctx)
		return err
	})
	return tok, value, version, err
}

// Commit implements fencing.Store.
func (p *Store) Commit(ctx context.Context, version string, tok fencing.Token, value []byte) error {
	return p.With(ctx, func(c *pgx.Conn) error {
		return pgfence.New(c).Store(p.resource, p.holder).Commit(ctx, version, tok, value)
	})
}

// Close closes the connections; it waits for calls in flight.
func (p *Store) Close() {
	for i := 0; i < cap(p.conns); i++ {
		if c := <-p.conns; c != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = c.Close(ctx)
			cancel()
		}
	}
}
