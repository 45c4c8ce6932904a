package fences

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	pgfence "github.com/elector-sidecar/elector-sidecar/pkg/fencing/postgres"
)

// Do begins its transaction in the batch of the check (pgx.Batch.BeginTx),
// so on a pool the connection is taken by that batch and must come back
// whatever happens after: a stale token, fn failing before or after its
// first statement, fn rolling back or committing itself, a check alone. On a
// pool of one connection a single leak makes the next Do wait for ever (here:
// until its deadline); what committed is exactly what should have.
func TestPostgresDoReturnsThePoolConnectionOnEveryOutcome(t *testing.T) {
	env := pgStart(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(env.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// pool.Close waits for every taken connection: after a leak it would
		// hang the failed test until the binary's timeout.
		if pool.Stat().AcquiredConns() == 0 {
			pool.Close()
		}
	})
	fence := pgfence.New(pool)
	const resource = "one-conn"
	newer := fencing.Token{Value: 8, LeaseUID: "b"}
	if err := fence.Do(ctx, resource, newer, "newer", pgInsertOrder(resource, 8, "newer")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("fn failed")
	for _, tt := range []struct {
		name  string
		tok   fencing.Token
		fn    func(tx pgx.Tx) error
		check func(err error) bool
	}{
		{"stale token", fencing.Token{Value: 7, LeaseUID: "a"}, pgInsertOrder(resource, 7, "stale"),
			func(err error) bool { return errors.Is(err, fencing.ErrStaleToken) }},
		{"fn fails before sending", newer, func(pgx.Tx) error { return boom },
			func(err error) bool { return errors.Is(err, boom) }},
		{"fn fails after its statement", newer, func(tx pgx.Tx) error {
			if err := pgInsertOrder(resource, 8, "rolled back")(tx); err != nil {
				return err
			}
			return boom
		}, func(err error) bool { return errors.Is(err, boom) }},
		{"a statement that fails", newer, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO no_such_table VALUES (1)")
			return err
		}, func(err error) bool { return err != nil && !errors.Is(err, fencing.ErrStaleToken) }},
		{"fn rolls back", newer, func(tx pgx.Tx) error {
			if err := pgInsertOrder(resource, 8, "fn rolled back")(tx); err != nil {
				return err
			}
			return tx.Rollback(ctx)
		}, func(err error) bool { return errors.Is(err, pgx.ErrTxClosed) }},
		{"fn commits", newer, func(tx pgx.Tx) error {
			if err := pgInsertOrder(resource, 8, "fn committed")(tx); err != nil {
				return err
			}
			return tx.Commit(ctx)
		}, func(err error) bool { return errors.Is(err, pgx.ErrTxClosed) }},
		{"nothing sent", newer, func(pgx.Tx) error { return nil },
			func(err error) bool { return err == nil }},
		{"a batch first", newer, func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			b.Queue("INSERT INTO pg_orders (resource, token, note) VALUES ($1, 8, 'batch')", resource)
			return tx.SendBatch(ctx, b).Close()
		}, func(err error) bool { return err == nil }},
		{"ok", newer, pgInsertOrder(resource, 8, "ok"),
			func(err error) bool { return err == nil }},
	} {
		for i := 0; i < 3; i++ { // a leak would show from the second round on
			dctx, dcancel := context.WithTimeout(ctx, 20*time.Second)
			err := fence.Do(dctx, resource, tt.tok, "w", tt.fn)
			dcancel()
			if !tt.check(err) {
				t.Fatalf("%s, round %d: Do returned %v", tt.name, i, err)
			}
			if n := pool.Stat().AcquiredConns(); n != 0 {
				t.Fatalf("%s, round %d: %d connections still taken after Do returned", tt.name, i, n)
			}
		}
	}
	want := []string{"newer"}
	for _, note := range []string{"fn committed", "batch", "ok"} {
		want = append(want, note, note, note)
	}
	if got := env.pgOrders(t, resource); !slices.Equal(got, want) {
		t.Fatalf("committed rows %q, want %q", got, want)
	}
}

// On a connection that sends every statement with the simple protocol (as
// behind a transaction-pooling PgBouncer), Do's batch of BEGIN, the check and
// the statement is one multi-statement query: an accepted token commits the
// statement, a stale one returns the StaleTokenError and commits nothing, and
// the connection is usable after either.
func TestPostgresDoOnASimpleProtocolConnection(t *testing.T) {
	env := pgStart(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := pgx.ParseConfig(env.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	fence := pgfence.New(conn)
	const resource = "simple"
	if err := fence.Do(ctx, resource, fencing.Token{Value: 2, LeaseUID: "a"}, "w", pgInsertOrder(resource, 2, "two")); err != nil {
		t.Fatal(err)
	}
	if err := pgfence.New(env.pool).Do(ctx, resource, fencing.Token{Value: 3, LeaseUID: "b"}, "w", pgInsertOrder(resource, 3, "three")); err != nil {
		t.Fatal(err)
	}
	err = fence.Do(ctx, resource, fencing.Token{Value: 2, LeaseUID: "a"}, "w", pgInsertOrder(resource, 2, "stale"))
	pgWantStale(t, err, fencing.StaleTokenError{Token: 2, Highest: 3, LeaseUID: "a", HighestLeaseUID: "b"})
	if err := fence.Do(ctx, resource, fencing.Token{Value: 3, LeaseUID: "b"}, "w", pgInsertOrder(resource, 3, "three again")); err != nil {
		t.Fatalf("after a stale check on this connection: %v", err)
	}
	if got, want := env.pgOrders(t, resource), []string{"two", "three", "three again"}; !slices.Equal(got, want) {
		t.Fatalf("committed rows %q, want %q", got, want)
	}
}
