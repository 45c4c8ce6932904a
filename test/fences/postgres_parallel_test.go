package fences

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	pgfence "github.com/elector-sidecar/elector-sidecar/pkg/fencing/postgres"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// Writers of the token already stored run in parallel: 8 transactions that
// checked token 5 are all open at once. A raise to 6 waits for every one of
// them (pg_blocking_pids names them), a check of token 5 sent while the
// raise waits queues behind it, and once the 8 commit the raise commits and
// every later check of token 5 is stale.
func TestPostgresRaiseWaitsForOpenEqualTokenWritersAndLaterOnesAreStale(t *testing.T) {
	env := pgStart(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const resource, writers = "parallel", 8
	old := fencing.Token{Value: 5, LeaseUID: "lease-a"}
	if err := pgfence.New(env.pool).Do(ctx, resource, old, "first", pgInsertOrder(resource, 5, "first")); err != nil {
		t.Fatal(err)
	}

	// 8 open transactions that checked token 5; each check returns while the
	// others are still open (with an exclusive lock per check the second
	// would wait for the first until the context's end).
	open := make([]pgx.Tx, writers)
	pids := make([]int32, writers)
	for i := range open {
		conn := env.pgConn(t)
		pids[i] = int32(conn.PgConn().PID())
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		checkCtx, checkCancel := context.WithTimeout(ctx, 20*time.Second)
		err = pgfence.Check(checkCtx, tx, resource, old, fmt.Sprintf("writer-%d", i))
		checkCancel()
		if err != nil {
			t.Fatalf("writer %d's check of the stored token, with %d transactions of it open: %v", i, i, err)
		}
		if err := pgInsertOrder(resource, 5, fmt.Sprintf("writer-%d", i))(tx); err != nil {
			t.Fatal(err)
		}
		open[i] = tx
	}

	raiser := env.pgConn(t)
	raiserPid := int32(raiser.PgConn().PID())
	raised := make(chan error, 1)
	go func() {
		raised <- pgfence.New(raiser).Do(ctx, resource, fencing.Token{Value: 6, LeaseUID: "lease-b"}, "raiser", pgInsertOrder(resource, 6, "raise"))
	}()
	waitBlockedBy(ctx, t, env, raiserPid, pids, "the raise waits for all 8 open transactions of token 5")

	// A check of token 5 that comes while the raise waits queues behind it.
	late := env.pgConn(t)
	latePid := int32(late.PgConn().PID())
	lateDone := make(chan error, 1)
	go func() {
		lateDone <- pgfence.New(late).Do(ctx, resource, old, "late", pgInsertOrder(resource, 5, "late"))
	}()
	waitBlockedBy(ctx, t, env, latePid, []int32{raiserPid}, "the late check of token 5 queues behind the raise")

	for i, tx := range open {
		select {
		case err := <-raised:
			t.Fatalf("the raise finished with %d of the 8 transactions of token 5 still open: %v", writers-i, err)
		case err := <-lateDone:
			t.Fatalf("the late check finished before the raise: %v", err)
		default:
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("writer %d's commit: %v", i, err)
		}
	}
	if err := <-raised; err != nil {
		t.Fatalf("the raise after the 8 commits: %v", err)
	}
	pgWantStale(t, <-lateDone, fencing.StaleTokenError{Token: 5, Highest: 6, LeaseUID: "lease-a", HighestLeaseUID: "lease-b"})
	for i := 0; i < 3; i++ {
		err := pgfence.New(env.pool).Do(ctx, resource, old, "later", pgInsertOrder(resource, 5, "later"))
		pgWantStale(t, err, fencing.StaleTokenError{Token: 5, Highest: 6, LeaseUID: "lease-a", HighestLeaseUID: "lease-b"})
	}

	want := []string{"first"}
	for i := 0; i < writers; i++ {
		want = append(want, fmt.Sprintf("writer-%d", i))
	}
	want = append(want, "raise")
	if got := env.pgOrders(t, resource); !slices.Equal(got, want) {
		t.Fatalf("committed rows %q, want %q", got, want)
	}
	h, err := pgCheckHistory(ctx, env.pool, resource)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != len(want) || h[len(h)-1].Holder != "raiser" {
		t.Fatalf("history %+v: want %d rows, the raise last", h, len(want))
	}
}

// waitBlockedBy waits until backend pid waits for every one of blockers.
func waitBlockedBy(ctx context.Context, t *testing.T, env *pgEnv, pid int32, blockers []int32, what string) {
	t.Helper()
	err := framework.Eventually(ctx, framework.PollInterval, 30*time.Second, what, func(ctx context.Context) error {
		var got []int32
		if err := env.pool.QueryRow(ctx, "SELECT pg_blocking_pids($1)", pid).Scan(&got); err != nil {
			return err
		}
		for _, b := range blockers {
			if !slices.Contains(got, b) {
				return fmt.Errorf("backend %d is blocked by %v, not by %d", pid, got, b)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Do sends the transaction's BEGIN, the check and fn's first statement in
// one pgx batch (one round trip), for Exec, Query and QueryRow alike; a
// stale token stops that statement and is Do's answer even when fn drops
// the statement's error. A DB that is neither a *pgx.Conn nor a
// *pgxpool.Pool begins alone, then sends the check with the statement.
func TestPostgresDoSendsTheCheckWithTheFirstStatement(t *testing.T) {
	env := pgStart(t)
	ctx := context.Background()
	tr := &pgTracer{}
	cfg, err := pgx.ParseConfig(env.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Tracer = tr
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	fence := pgfence.New(conn)
	tok := fencing.Token{Value: 3, LeaseUID: "a"}
	const begin = "begin isolation level read committed"

	for _, tt := range []struct {
		name string
		fn   func(tx pgx.Tx) error
	}{
		{"Exec", func(tx pgx.Tx) error { return pgInsertOrder("batched", 3, "exec")(tx) }},
		{"Query", func(tx pgx.Tx) error {
			rows, _ := tx.Query(ctx, "INSERT INTO pg_orders (resource, token, note) VALUES ('batched', 3, 'query') RETURNING note")
			notes, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil || !slices.Equal(notes, []string{"query"}) {
				return fmt.Errorf("rows %q, %v", notes, err)
			}
			return pgInsertOrder("batched", 3, "query, second statement")(tx)
		}},
		{"QueryRow", func(tx pgx.Tx) error {
			var note string
			if err := tx.QueryRow(ctx, "INSERT INTO pg_orders (resource, token, note) VALUES ('batched', 3, 'queryrow') RETURNING note").Scan(&note); err != nil || note != "queryrow" {
				return fmt.Errorf("row %q, %v", note, err)
			}
			return pgInsertOrder("batched", 3, "queryrow, second statement")(tx)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tr.reset()
			if err := fence.Do(ctx, "batched", tok, "pod-a", tt.fn); err != nil {
				t.Fatal(err)
			}
			batches, queries := tr.get()
			if len(batches) != 1 || len(batches[0]) != 3 || batches[0][0] != begin || !strings.Contains(batches[0][1], "elector_fence(") || !strings.Contains(batches[0][2], "INSERT INTO pg_orders") {
				t.Fatalf("batches %q: want one, BEGIN, the check, then fn's first statement", batches)
			}
			for _, q := range queries {
				if strings.Contains(q, "elector_fence(") || q == begin {
					t.Fatalf("the check or BEGIN also ran alone: %q", queries)
				}
			}
		})
	}

	// Any other DB: BEGIN alone (BeginTx), then the check and the statement.
	t.Run("a DB that only begins", func(t *testing.T) {
		tr.reset()
		if err := pgfence.New(beginOnly{conn}).Do(ctx, "batched", tok, "pod-a", pgInsertOrder("batched", 3, "begin only")); err != nil {
			t.Fatal(err)
		}
		batches, queries := tr.get()
		if len(batches) != 1 || len(batches[0]) != 2 || !strings.Contains(batches[0][0], "elector_fence(") || !strings.Contains(batches[0][1], "INSERT INTO pg_orders") {
			t.Fatalf("batches %q: want one, the check then fn's first statement", batches)
		}
		if !slices.Equal(queries, []string{begin, "commit"}) {
			t.Fatalf("queries %q: want BEGIN and COMMIT alone", queries)
		}
	})

	// What cannot ride in a batch runs after the check, which goes with the
	// BEGIN alone: a statement with its own QueryExecMode, and a function
	// that sends nothing.
	for _, tt := range []struct {
		name string
		fn   func(tx pgx.Tx) error
		want []string
	}{
		{"QueryExecMode argument", func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO pg_orders (resource, token, note) VALUES ('batched', 3, 'simple protocol')", pgx.QueryExecModeSimpleProtocol)
			return err
		}, []string{"INSERT INTO pg_orders (resource, token, note) VALUES ('batched', 3, 'simple protocol')"}},
		{"nothing sent", func(pgx.Tx) error { return nil }, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tr.reset()
			if err := fence.Do(ctx, "batched", tok, "pod-a", tt.fn); err != nil {
				t.Fatal(err)
			}
			batches, queries := tr.get()
			var got []string
			for _, q := range queries {
				if q != "commit" {
					got = append(got, q)
				}
			}
			if len(batches) != 1 || !slices.Equal(batches[0], []string{begin, pgfence.CheckSQL}) || !slices.Equal(got, tt.want) {
				t.Fatalf("batches %q, queries %q: want one batch of BEGIN and the check, then %q", batches, queries, tt.want)
			}
		})
	}

	if err := pgfence.New(env.pool).Do(ctx, "batched", fencing.Token{Value: 4, LeaseUID: "b"}, "newer", pgInsertOrder("batched", 4, "newer")); err != nil {
		t.Fatal(err)
	}
	var stmtErr error
	err = fence.Do(ctx, "batched", tok, "pod-a", func(tx pgx.Tx) error {
		_, stmtErr = tx.Exec(ctx, "INSERT INTO pg_orders (resource, token, note) VALUES ('batched', 3, 'stale')")
		return nil // drops the error: Do must not
	})
	pgWantStale(t, err, fencing.StaleTokenError{Token: 3, Highest: 4, LeaseUID: "a", HighestLeaseUID: "b"})
	if !errors.Is(stmtErr, fencing.ErrStaleToken) {
		t.Fatalf("fn's first statement returned %v, want the stale token", stmtErr)
	}
	want := []string{"exec", "query", "query, second statement", "queryrow", "queryrow, second statement", "begin only", "simple protocol", "newer"}
	if got := env.pgOrders(t, "batched"); !slices.Equal(got, want) {
		t.Fatalf("rows %q, want %q", got, want)
	}
}

// beginOnly is a DB that is neither a *pgx.Conn nor a *pgxpool.Pool.
type beginOnly struct{ conn *pgx.Conn }

func (d beginOnly) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	return d.conn.BeginTx(ctx, opts)
}

// pgTracer records the batches and the lone queries a connection sends.
type pgTracer struct {
	batches [][]string
	queries []string
}

func (tr *pgTracer) reset() { tr.batches, tr.queries = nil, nil }

func (tr *pgTracer) get() ([][]string, []string) { return tr.batches, tr.queries }

func (tr *pgTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	tr.queries = append(tr.queries, d.SQL)
	return ctx
}

func (tr *pgTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (tr *pgTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	var sqls []string
	for _, q := range d.Batch.QueuedQueries {
		sqls = append(sqls, q.SQL)
	}
	tr.batches = append(tr.batches, sqls)
	return ctx
}

func (tr *pgTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (tr *pgTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
