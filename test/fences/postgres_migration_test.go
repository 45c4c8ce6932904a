package fences

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	pgfence "github.com/elector-sidecar/elector-sidecar/pkg/fencing/postgres"
)

// connIn opens a connection whose search_path is schema (created if
// missing), closed at the end of the test.
func (e *pgEnv) connIn(t *testing.T, schema string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(e.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = schema
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// The check is elector_fence(): the migration creates no fence(), and an
// app's own fence(text, bigint, text, text) on the search path survives it
// unchanged.
func TestPostgresMigrationLeavesAnAppsOwnFenceFunctionAlone(t *testing.T) {
	env := pgStart(t)
	ctx := context.Background()
	conn := env.connIn(t, "app")
	const own = `CREATE FUNCTION fence(resource text, token bigint, lease_uid text DEFAULT NULL, holder text DEFAULT NULL)
		RETURNS bigint LANGUAGE sql AS 'SELECT 42::bigint'`
	if _, err := conn.Exec(ctx, own); err != nil {
		t.Fatal(err)
	}
	if err := pgfence.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	var got int64
	if err := conn.QueryRow(ctx, "SELECT fence('orders', 7)").Scan(&got); err != nil || got != 42 {
		t.Fatalf("the app's own fence() after the migration: %d, %v; want its 42", got, err)
	}
	if err := conn.QueryRow(ctx, "SELECT elector_fence('orders', 7)").Scan(&got); err != nil || got != 7 {
		t.Fatalf("elector_fence('orders', 7): %d, %v", got, err)
	}
	var n int
	if err := env.pool.QueryRow(ctx, "SELECT count(*) FROM pg_proc WHERE proname = 'fence' AND pronamespace = 'public'::regnamespace").Scan(&n); err != nil || n != 0 {
		t.Fatalf("the migration created %d fence() in public (%v)", n, err)
	}
}

// A database migrated before the rename keeps working: its fence() (ours)
// becomes a wrapper of elector_fence(), with the same rule and the version
// count the old Store expects, and the stored token and history are kept.
func TestPostgresMigrationTurnsTheOldFenceFunctionIntoAWrapper(t *testing.T) {
	env := pgStart(t)
	ctx := context.Background()
	conn := env.connIn(t, "legacy")
	old, err := os.ReadFile("testdata/migration-fence-v0.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, string(old)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT fence('orders', 3, 'a', 'old')"); err != nil {
		t.Fatal(err)
	}
	if err := pgfence.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	var body string
	if err := conn.QueryRow(ctx, "SELECT prosrc FROM pg_proc WHERE oid = to_regprocedure('fence(text, bigint, text, text)')").Scan(&body); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(body, "elector_fence($1, $2, $3, $4)") {
		t.Fatalf("the old fence() was not turned into a wrapper:\n%s", body)
	}
	if _, err := conn.Exec(ctx, "SELECT fence('orders', 3, 'a', 'old')"); err != nil {
		t.Fatal(err)
	}
	var version int64
	if err := conn.QueryRow(ctx, "SELECT version FROM elector_fence WHERE resource = 'orders'").Scan(&version); err != nil || version != 2 {
		t.Fatalf("version %d after a call of the old fence() and one of the wrapper (%v), want 2", version, err)
	}
	_, err = conn.Exec(ctx, "SELECT fence('orders', 2, 'a', 'old')")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != pgfence.CodeStaleToken {
		t.Fatalf("fence('orders', 2) after 3: %v, want SQLSTATE %s", err, pgfence.CodeStaleToken)
	}
	tok, err := pgfence.New(conn).Stored(ctx, "orders")
	if err != nil || tok != (fencing.Token{Value: 3, LeaseUID: "a"}) {
		t.Fatalf("stored %+v, %v", tok, err)
	}
	h, err := pgfence.New(conn).History(ctx, "orders")
	if err != nil || len(h) != 2 {
		t.Fatalf("history %+v, %v: want the check before the migration and the one after", h, err)
	}
}

// The history is bounded by default (elector_fence_settings.history_keep,
// DefaultHistoryKeep rows per resource), pruned as the package doc says;
// history_keep 0 keeps every row, history false writes none, and a
// migration run again keeps the settings.
func TestPostgresHistoryIsBoundedByDefault(t *testing.T) {
	env := pgStart(t)
	ctx := context.Background()
	var on bool
	var keep int64
	if err := env.pool.QueryRow(ctx, "SELECT history, history_keep FROM elector_fence_settings").Scan(&on, &keep); err != nil {
		t.Fatal(err)
	}
	if !on || keep != pgfence.DefaultHistoryKeep || keep <= 0 {
		t.Fatalf("settings after the migration: history %v, history_keep %d; want true, %d", on, keep, pgfence.DefaultHistoryKeep)
	}
	fence := pgfence.New(env.pool)
	write := func(resource string, n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			if err := fence.Do(ctx, resource, fencing.Token{Value: int64(i / 50)}, "w", pgInsertOrder(resource, int64(i/50), "x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	count := func(resource string) int {
		t.Helper()
		h, err := pgCheckHistory(ctx, env.pool, resource)
		if err != nil {
			t.Fatal(err)
		}
		return len(h)
	}

	const small = 10
	if _, err := env.pool.Exec(ctx, "UPDATE elector_fence_settings SET history_keep = $1", small); err != nil {
		t.Fatal(err)
	}
	if err := pgfence.Migrate(ctx, env.pool); err != nil {
		t.Fatal(err)
	}
	write("pruned", 1100)
	// One check in 1024 (by history id) prunes: at most small + 1023 rows are
	// left, at least small.
	if n := count("pruned"); n < small || n > small+1023 {
		t.Fatalf("%d history rows of 1100 checks with history_keep %d (kept over a migration): want %d to %d", n, small, small, small+1023)
	}

	if _, err := env.pool.Exec(ctx, "UPDATE elector_fence_settings SET history_keep = 0"); err != nil {
		t.Fatal(err)
	}
	write("kept", 150)
	if n := count("kept"); n != 150 {
		t.Fatalf("%d history rows of 150 checks with history_keep 0, want all", n)
	}

	if _, err := env.pool.Exec(ctx, "UPDATE elector_fence_settings SET history = false"); err != nil {
		t.Fatal(err)
	}
	write("none", 20)
	if n := count("none"); n != 0 {
		t.Fatalf("%d history rows with history false", n)
	}
	if got := env.pgOrders(t, "none"); len(got) != 20 {
		t.Fatalf("%d of 20 writes committed without history", len(got))
	}
}
