package fences

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	pgfence "github.com/elector-sidecar/elector-sidecar/pkg/fencing/postgres"
	"github.com/elector-sidecar/elector-sidecar/test/framework/dbserver"
)

// pgEnv is a throwaway PostgreSQL with the fence migrated and a table of
// "user data" that fenced transactions write to.
type pgEnv struct {
	srv  *dbserver.Server
	pool *pgxpool.Pool
}

// pgStart starts a PostgreSQL for the test (a missing binary fails it), runs
// the migration and creates pg_orders, the caller's own table.
func pgStart(t testing.TB) *pgEnv {
	t.Helper()
	srv := dbserver.Postgres(t)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pgfence.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE pg_orders (id bigserial PRIMARY KEY, resource text NOT NULL, token bigint NOT NULL, note text)"); err != nil {
		t.Fatal(err)
	}
	return &pgEnv{srv: srv, pool: pool}
}

// pgConn opens a connection of its own (one backend), closed at the end of
// the test.
func (e *pgEnv) pgConn(t testing.TB) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), e.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// pgInsertOrder is the caller's write inside a fenced transaction.
func pgInsertOrder(resource string, token int64, note string) func(pgx.Tx) error {
	return func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), "INSERT INTO pg_orders (resource, token, note) VALUES ($1, $2, $3)", resource, token, note)
		return err
	}
}

// pgOrders returns the notes the caller's committed rows of resource carry, in insert order.
func (e *pgEnv) pgOrders(t testing.TB, resource string) []string {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), "SELECT note FROM pg_orders WHERE resource = $1 ORDER BY id", resource)
	if err != nil {
		t.Fatal(err)
	}
	notes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return notes
}

// pgStored reads the fence's row of resource as the database holds it.
func (e *pgEnv) pgStored(t testing.TB, resource string) fencing.Token {
	t.Helper()
	tok, err := pgfence.New(e.pool).Stored(context.Background(), resource)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// pgCheckHistory checks the database's own record of the accepted checks of
// resource: tokens never go down in id order, a row that raised the token
// was written after every row before it (writers of one token run in
// parallel, so their rows' times may interleave; a raise waits for all of
// them), and the last entry is the stored token. It returns the history.
func pgCheckHistory(ctx context.Context, pool *pgxpool.Pool, resource string) ([]pgfence.Entry, error) {
	f := pgfence.New(pool)
	h, err := f.History(ctx, resource)
	if err != nil {
		return nil, err
	}
	var latest time.Time // the latest committed_at so far
	for i := range h {
		if i > 0 && h[i].Token.Value < h[i-1].Token.Value {
			return h, fmt.Errorf("history went down: id %d token %d after id %d token %d", h[i].ID, h[i].Token.Value, h[i-1].ID, h[i-1].Token.Value)
		}
		if i > 0 && h[i].Token.Value > h[i-1].Token.Value && h[i].CommittedAt.Before(latest) {
			return h, fmt.Errorf("history id %d raised the token to %d at %v, before an earlier row's %v", h[i].ID, h[i].Token.Value, h[i].CommittedAt, latest)
		}
		if h[i].CommittedAt.After(latest) {
			latest = h[i].CommittedAt
		}
	}
	stored, err := f.Stored(ctx, resource)
	if err != nil {
		return h, err
	}
	if len(h) > 0 && h[len(h)-1].Token != stored {
		return h, fmt.Errorf("last history entry %+v, stored token %+v", h[len(h)-1].Token, stored)
	}
	return h, nil
}

// pgWantStale fails unless err is a *fencing.StaleTokenError equal to want.
func pgWantStale(t testing.TB, err error, want fencing.StaleTokenError) {
	t.Helper()
	var ste *fencing.StaleTokenError
	if !errors.As(err, &ste) || !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("got %v, want a *fencing.StaleTokenError", err)
	}
	if *ste != want {
		t.Fatalf("got %#v, want %#v", *ste, want)
	}
}

// pgLevels are the isolation levels the fence is tested under.
var pgLevels = []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.Serializable}
