package fences

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	"github.com/elector-sidecar/elector-sidecar/pkg/fencing/httpstore"
	pgfence "github.com/elector-sidecar/elector-sidecar/pkg/fencing/postgres"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// The PostgreSQL fence (pkg/fencing/postgres) against a real PostgreSQL
// started by test/framework/dbserver: elector_fence() runs in the database, so
// everything here runs it there.

// Steps of one resource, in order, each checked against what PostgreSQL then
// holds: the stored token, and which of the caller's rows committed.
func TestPostgresFenceAppliesTheFencingRule(t *testing.T) {
	env := pgStart(t)
	ctx := context.Background()
	type step struct {
		tok       fencing.Token
		wantStale *fencing.StaleTokenError
		// wantStored is the stored token after the step.
		wantStored fencing.Token
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"equal tokens pass", []step{
			{tok: fencing.Token{Value: 3, LeaseUID: "a"}, wantStored: fencing.Token{Value: 3, LeaseUID: "a"}},
			{tok: fencing.Token{Value: 3, LeaseUID: "a"}, wantStored: fencing.Token{Value: 3, LeaseUID: "a"}},
		}},
		{"lower token is stale, names the stored token, and commits nothing", []step{
			{tok: fencing.Token{Value: 7, LeaseUID: "a"}, wantStored: fencing.Token{Value: 7, LeaseUID: "a"}},
			{tok: fencing.Token{Value: 6, LeaseUID: "a"}, wantStale: &fencing.StaleTokenError{Token: 6, Highest: 7, LeaseUID: "a", HighestLeaseUID: "a"}, wantStored: fencing.Token{Value: 7, LeaseUID: "a"}},
			{tok: fencing.Token{Value: 0}, wantStale: &fencing.StaleTokenError{Token: 0, Highest: 7, HighestLeaseUID: "a"}, wantStored: fencing.Token{Value: 7, LeaseUID: "a"}},
		}},
		{"same value under another lease is stale", []step{
			{tok: fencing.Token{Value: 7, LeaseUID: "a"}, wantStored: fencing.Token{Value: 7, LeaseUID: "a"}},
			{tok: fencing.Token{Value: 7, LeaseUID: "b"}, wantStale: &fencing.StaleTokenError{Token: 7, Highest: 7, LeaseUID: "b", HighestLeaseUID: "a"}, wantStored: fencing.Token{Value: 7, LeaseUID: "a"}},
		}},
		{"an equal value without a UID passes and keeps the stored UID", []step{
			{tok: fencing.Token{Value: 7, LeaseUID: "a"}, wantStored: fencing.Token{Value: 7, LeaseUID: "a"}},
			{tok: fencing.Token{Value: 7}, wantStored: fencing.Token{Value: 7, LeaseUID: "a"}},
		}},
		{"an unknown stored UID falls back to the value", []step{
			{tok: fencing.Token{Value: 4}, wantStored: fencing.Token{Value: 4}},
			{tok: fencing.Token{Value: 4, LeaseUID: "b"}, wantStored: fencing.Token{Value: 4, LeaseUID: "b"}},
		}},
		{"a higher value is accepted under any lease, and its UID recorded (also none)", []step{
			{tok: fencing.Token{Value: 2, LeaseUID: "a"}, wantStored: fencing.Token{Value: 2, LeaseUID: "a"}},
			{tok: fencing.Token{Value: 5, LeaseUID: "b"}, wantStored: fencing.Token{Value: 5, LeaseUID: "b"}},
			{tok: fencing.Token{Value: 6}, wantStored: fencing.Token{Value: 6}},
		}},
		{"token 0 is a valid first token", []step{
			{tok: fencing.Token{Value: 0}, wantStored: fencing.Token{Value: 0}},
		}},
	}
	for _, level := range pgLevels {
		for i, tt := range tests {
			t.Run(fmt.Sprintf("%s/%s", level, tt.name), func(t *testing.T) {
				fence := pgfence.New(env.pool, pgfence.WithIsolation(level))
				resource := fmt.Sprintf("rule-%s-%d", strings.ReplaceAll(string(level), " ", "-"), i)
				var wantNotes []string
				for j, s := range tt.steps {
					note := fmt.Sprintf("step %d token %s", j, s.tok)
					err := fence.Do(ctx, resource, s.tok, "pod-a", pgInsertOrder(resource, s.tok.Value, note))
					if s.wantStale != nil {
						pgWantStale(t, err, *s.wantStale)
					} else if err != nil {
						t.Fatalf("step %d: %v", j, err)
					} else {
						wantNotes = append(wantNotes, note)
					}
					if got := env.pgStored(t, resource); got != s.wantStored {
						t.Fatalf("step %d: stored %+v, want %+v", j, got, s.wantStored)
					}
					if got := env.pgOrders(t, resource); !slices.Equal(got, wantNotes) {
						t.Fatalf("step %d: the caller's committed rows are %q, want %q", j, got, wantNotes)
					}
				}
				h, err := pgCheckHistory(ctx, env.pool, resource)
				if err != nil {
					t.Fatal(err)
				}
				if len(h) != len(wantNotes) {
					t.Fatalf("%d history rows for %d accepted writes", len(h), len(wantNotes))
				}
			})
		}
	}
}

// Writers with mixed tokens race on one resource: the stored token ends at
// the highest accepted one, the history (the database's own record, in
// commit order) never goes down and has one row per accepted write, and
// every rejection named a token higher than the rejected one.
func TestPostgresConcurrentWritersWithMixedTokensNeverLowerTheToken(t *testing.T) {
	env := pgStart(t)
	ctx := context.Background()
	for _, level := range pgLevels {
		t.Run(string(level), func(t *testing.T) {
			fence := pgfence.New(env.pool, pgfence.WithIsolation(level), pgfence.WithMaxAttempts(50))
			resource := "race-" + strings.ReplaceAll(string(level), " ", "-")
			const writers, writes = 8, 25
			var (
				mu          sync.Mutex
				accepted    []int64
				maxAccepted int64 = -1
				stale       int
			)
			var wg sync.WaitGroup
			errs := make(chan error, writers*writes)
			for w := 0; w < writers; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					rng := rand.New(rand.NewSource(int64(w)))
					for i := 0; i < writes; i++ {
						// Tokens climb with jitter, as leaders come and go: writers overtake each other.
						tok := fencing.Token{Value: int64(i + rng.Intn(6)), LeaseUID: "lease"}
						err := fence.Do(ctx, resource, tok, fmt.Sprintf("writer-%d", w), pgInsertOrder(resource, tok.Value, fmt.Sprintf("w%d-%d", w, i)))
						var ste *fencing.StaleTokenError
						switch {
						case err == nil:
							mu.Lock()
							accepted = append(accepted, tok.Value)
							maxAccepted = max(maxAccepted, tok.Value)
							mu.Unlock()
						case errors.As(err, &ste):
							if ste.Highest <= tok.Value {
								errs <- fmt.Errorf("token %d rejected by stored %d", tok.Value, ste.Highest)
							}
							mu.Lock()
							stale++
							mu.Unlock()
						default:
							errs <- err
						}
					}
				}(w)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if got := env.pgStored(t, resource); got.Value != maxAccepted {
				t.Fatalf("stored token %d, highest accepted %d", got.Value, maxAccepted)
			}
			h, err := pgCheckHistory(ctx, env.pool, resource)
			if err != nil {
				t.Fatal(err)
			}
			if len(h) != len(accepted) || len(env.pgOrders(t, resource)) != len(accepted) {
				t.Fatalf("%d writes accepted, %d history rows, %d rows of the caller", len(accepted), len(h), len(env.pgOrders(t, resource)))
			}
			if len(accepted) == 0 || stale == 0 {
				t.Fatalf("%d accepted, %d stale: the race did not exercise both outcomes", len(accepted), stale)
			}
			t.Logf("%s: %d accepted, %d stale, highest %d", level, len(accepted), stale, maxAccepted)
		})
	}
}

// A stale writer that blocks on the resource's row lock behind a newer
// writer's open transaction is judged against what that transaction leaves:
// rejected if it commits, accepted if it rolls back. The blocking is proven
// with pg_blocking_pids, not by timing.
func TestPostgresStaleWriterBlockedBehindANewerOneIsRejectedWhenItCommits(t *testing.T) {
	env := pgStart(t)
	ctx := context.Background()
	for _, tt := range []struct {
		name      string
		end       string // how the newer transaction ends
		wantStale bool
	}{
		{"newer commits", "COMMIT", true},
		{"newer rolls back", "ROLLBACK", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resource := "blocked-" + tt.end
			if err := pgfence.New(env.pool).Do(ctx, resource, fencing.Token{Value: 5}, "old", pgInsertOrder(resource, 5, "first")); err != nil {
				t.Fatal(err)
			}
			newer, older := env.pgConn(t), env.pgConn(t)
			newerPid, olderPid := newer.PgConn().PID(), older.PgConn().PID()
			if _, err := newer.Exec(ctx, "BEGIN"); err != nil {
				t.Fatal(err)
			}
			if _, err := newer.Exec(ctx, "SELECT elector_fence($1, 10, NULL, 'newer')", resource); err != nil {
				t.Fatal(err)
			}
			if _, err := newer.Exec(ctx, "INSERT INTO pg_orders (resource, token, note) VALUES ($1, 10, 'newer')", resource); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				done <- pgfence.New(older).Do(ctx, resource, fencing.Token{Value: 9}, "older", pgInsertOrder(resource, 9, "older"))
			}()
			err := framework.Eventually(ctx, framework.PollInterval, 20*time.Second, "the older writer waits for the newer one's row lock", func(ctx context.Context) error {
				var blockers []int32
				if err := env.pool.QueryRow(ctx, "SELECT pg_blocking_pids($1)", int32(olderPid)).Scan(&blockers); err != nil {
					return err
				}
				if !slices.Contains(blockers, int32(newerPid)) {
					return fmt.Errorf("backend %d is blocked by %v, not by %d", olderPid, blockers, newerPid)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				t.Fatalf("the older writer finished while the newer one held the lock: %v", err)
			default:
			}
			if _, err := newer.Exec(ctx, tt.end); err != nil {
				t.Fatal(err)
			}
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("the older writer is still blocked after the newer transaction ended")
			}
			if tt.wantStale {
				pgWantStale(t, err, fencing.StaleTokenError{Token: 9, Highest: 10})
				if got, want := env.pgOrders(t, resource), []string{"first", "newer"}; !slices.Equal(got, want) {
					t.Fatalf("rows %q, want %q", got, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("after the newer writer rolled back, token 9 (stored 5) was rejected: %v", err)
			}
			if got, want := env.pgOrders(t, resource), []string{"first", "older"}; !slices.Equal(got, want) {
				t.Fatalf("rows %q, want %q", got, want)
			}
			if got := env.pgStored(t, resource); got.Value != 9 {
				t.Fatalf("stored %d, want 9", got.Value)
			}
		})
	}
}

// A connection killed in the middle of a fenced transaction (after the check
// and the caller's insert) commits nothing: no token, no history, no row.
func TestPostgresDroppedConnectionMidTransactionCommitsNothing(t *testing.T) {
	env := pgStart(t)
	ctx := context.Background()
	const resource = "dropped"
	if err := pgfence.New(env.pool).Do(ctx, resource, fencing.Token{Value: 3, LeaseUID: "a"}, "before", pgInsertOrder(resource, 3, "before")); err != nil {
		t.Fatal(err)
	}
	conn := env.pgConn(t)
	pid := conn.PgConn().PID()
	inside, terminated := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- pgfence.New(conn).Do(ctx, resource, fencing.Token{Value: 8, LeaseUID: "b"}, "dropped", func(tx pgx.Tx) error {
			if err := pgInsertOrder(resource, 8, "dropped")(tx); err != nil {
				return err
			}
			close(inside)
			<-terminated
			_, err := tx.Exec(ctx, "INSERT INTO pg_orders (resource, token, note) VALUES ($1, 8, 'after the kill')", resource)
			return err
		})
	}()
	select {
	case <-inside:
	case err := <-done:
		t.Fatalf("the fenced transaction ended early: %v", err)
	}
	var ok bool
	if err := env.pool.QueryRow(ctx, "SELECT pg_terminate_backend($1)", int32(pid)).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d): %v, %v", pid, ok, err)
	}
	err := framework.Eventually(ctx, framework.PollInterval, 20*time.Second, "the killed backend is gone", func(ctx context.Context) error {
		var n int
		if err := env.pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&n); err != nil {
			return err
		}
		if n != 0 {
			return fmt.Errorf("backend %d still listed", pid)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	close(terminated)
	err = <-done
	if err == nil || errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("got %v, want a connection error", err)
	}
	if got, want := env.pgStored(t, resource), (fencing.Token{Value: 3, LeaseUID: "a"}); got != want {
		t.Fatalf("stored %+v after the dropped transaction, want %+v", got, want)
	}
	if got, want := env.pgOrders(t, resource), []string{"before"}; !slices.Equal(got, want) {
		t.Fatalf("rows %q, want %q", got, want)
	}
	h, err := pgCheckHistory(ctx, env.pool, resource)
	if err != nil || len(h) != 1 {
		t.Fatalf("history %+v, %v: want the one committed check", h, err)
	}
}

// Bad input is an error, from Go (before any SQL) and from SQL (SQLSTATE
// 22023, not the stale token's EF001), and creates no row.
func TestPostgresFenceRejectsBadInput(t *testing.T) {
	env := pgStart(t)
	ctx := context.Background()
	fence := pgfence.New(env.pool)
	for _, tt := range []struct {
		name     string
		resource string
		token    int64
	}{
		{"empty resource", "", 1},
		{"negative token", "orders", -1},
	} {
		t.Run("Go/"+tt.name, func(t *testing.T) {
			called := false
			err := fence.Do(ctx, tt.resource, fencing.Token{Value: tt.token}, "", func(pgx.Tx) error { called = true; return nil })
			if !errors.Is(err, pgfence.ErrInvalid) || errors.Is(err, fencing.ErrStaleToken) || called {
				t.Fatalf("got %v (function called: %v), want ErrInvalid", err, called)
			}
		})
	}
	for _, tt := range []struct {
		name, sql, wantMsg string
	}{
		{"empty resource", "SELECT elector_fence('', 1)", "invalid resource name: must not be empty"},
		{"NULL resource", "SELECT elector_fence(NULL, 1)", "invalid resource name: must not be empty"},
		{"negative token", "SELECT elector_fence('orders', -1)", "invalid fencing token -1 for resource 'orders': must be a non-negative integer"},
		{"NULL token", "SELECT elector_fence('orders', NULL)", "invalid fencing token NULL for resource 'orders'"},
	} {
		t.Run("SQL/"+tt.name, func(t *testing.T) {
			_, err := env.pool.Exec(ctx, tt.sql)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != pgfence.CodeInvalidInput || !strings.Contains(pgErr.Message, tt.wantMsg) {
				t.Fatalf("got %v, want SQLSTATE %s with %q", err, pgfence.CodeInvalidInput, tt.wantMsg)
			}
			if !errors.Is(pgfence.ParseError(err, fencing.Token{}), pgfence.ErrInvalid) {
				t.Fatalf("ParseError(%v) does not match ErrInvalid", err)
			}
		})
	}
	var rows int
	if err := env.pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM elector_fence) + (SELECT count(*) FROM elector_fence_history)").Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("bad input left %d rows (%v)", rows, err)
	}
}

// elector_fence() from plain SQL, as an app in any language calls it: in its own
// transaction, with SQLSTATE EF001 and the stored token in MESSAGE and DETAIL
// on a stale token, and the transaction's other writes rolled back with it.
func TestPostgresFenceFunctionFromPlainSQL(t *testing.T) {
	env := pgStart(t)
	ctx := context.Background()
	conn := env.pgConn(t)
	exec := func(sql string, args ...any) error { _, err := conn.Exec(ctx, sql, args...); return err }
	for _, sql := range []string{"BEGIN", "INSERT INTO pg_orders (resource, token, note) VALUES ('orders', 7, 'billed')"} {
		if err := exec(sql); err != nil {
			t.Fatal(err)
		}
	}
	var accepted int64
	if err := conn.QueryRow(ctx, "SELECT elector_fence('orders', 7, '4f0c9b52', 'pod-a')").Scan(&accepted); err != nil || accepted != 7 {
		t.Fatalf("elector_fence('orders', 7): %d, %v", accepted, err)
	}
	if err := exec("COMMIT"); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, call, wantMsg, wantDetail string
	}{
		{"lower token", "SELECT elector_fence('orders', 6)", "stale fencing token 6 for resource 'orders': the resource already accepted token 7", "token=6 stored=7 stored_lease_uid=4f0c9b52"},
		{"same value, other lease", "SELECT elector_fence('orders', 7, 'c0ffee')", "stale fencing token 7 for resource 'orders': the resource already accepted token 7 under lease UID 4f0c9b52, this token is from lease UID c0ffee", "token=7 stored=7 stored_lease_uid=4f0c9b52"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := exec("BEGIN"); err != nil {
				t.Fatal(err)
			}
			if err := exec("INSERT INTO pg_orders (resource, token, note) VALUES ('orders', 6, $1)", tt.name); err != nil {
				t.Fatal(err)
			}
			err := exec(tt.call)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != pgfence.CodeStaleToken || pgErr.Message != tt.wantMsg || pgErr.Detail != tt.wantDetail {
				t.Fatalf("got %#v, want SQLSTATE %s, %q, detail %q", err, pgfence.CodeStaleToken, tt.wantMsg, tt.wantDetail)
			}
			if err := exec("SELECT 1"); err == nil || !strings.Contains(err.Error(), "25P02") {
				t.Fatalf("the transaction goes on after a stale token: %v", err)
			}
			if err := exec("ROLLBACK"); err != nil {
				t.Fatal(err)
			}
		})
	}
	if got, want := env.pgOrders(t, "orders"), []string{"billed"}; !slices.Equal(got, want) {
		t.Fatalf("rows %q, want %q", got, want)
	}
}

// Under SERIALIZABLE, PostgreSQL aborts what it cannot serialize (40001): a
// elector_fence() whose row changed after the transaction's snapshot, and a write
// skew in the caller's function. Do retries such a transaction (checking the
// token again) unless told not to, and nothing of a failed attempt commits.
func TestPostgresSerializableFailuresAreRetriedOrReturnedAndCommitNothing(t *testing.T) {
	env := pgStart(t)
	ctx := context.Background()

	t.Run("elector_fence() on a row changed after the snapshot", func(t *testing.T) {
		conn := env.pgConn(t)
		tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, "SELECT count(*) FROM elector_fence"); err != nil { // takes the snapshot
			t.Fatal(err)
		}
		if err := pgfence.New(env.pool).Do(ctx, "snap", fencing.Token{Value: 5}, "", pgInsertOrder("snap", 5, "5")); err != nil {
			t.Fatal(err)
		}
		// A resource row created after the snapshot: the insert conflicts with it.
		err = pgfence.Check(ctx, tx, "snap", fencing.Token{Value: 6}, "")
		if !pgfence.IsSerializationFailure(err) {
			t.Fatalf("got %v, want a serialization failure", err)
		}
	})

	// writeSkew runs two fenced transactions on two resources whose functions
	// each read what the other inserts, both reads before either insert:
	// SERIALIZABLE cannot commit both.
	writeSkew := func(t *testing.T, fence *pgfence.Fence, tag string) (calls int32, errA, errB error) {
		var barrier sync.WaitGroup
		barrier.Add(2)
		var n atomic.Int32
		fn := func(resource, reads, writes string) func(pgx.Tx) error {
			return func(tx pgx.Tx) error {
				first := n.Add(1) <= 2
				var c int
				if err := tx.QueryRow(ctx, "SELECT count(*) FROM pg_orders WHERE note = $1", reads).Scan(&c); err != nil {
					return err
				}
				if first {
					barrier.Done()
					barrier.Wait()
				}
				return pgInsertOrder(resource, 1, writes)(tx)
			}
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			errA = fence.Do(ctx, tag+"-a", fencing.Token{Value: 1}, "", fn(tag+"-a", tag+"-y", tag+"-x"))
		}()
		go func() {
			defer wg.Done()
			errB = fence.Do(ctx, tag+"-b", fencing.Token{Value: 1}, "", fn(tag+"-b", tag+"-x", tag+"-y"))
		}()
		wg.Wait()
		return n.Load(), errA, errB
	}

	t.Run("write skew, no retry: the failure is returned", func(t *testing.T) {
		fence := pgfence.New(env.pool, pgfence.WithIsolation(pgx.Serializable), pgfence.WithMaxAttempts(1))
		_, errA, errB := writeSkew(t, fence, "once")
		failed := map[string]error{"once-a": errA, "once-b": errB}
		var loser string
		for r, err := range failed {
			if err == nil {
				continue
			}
			if !pgfence.IsSerializationFailure(err) || loser != "" {
				t.Fatalf("a: %v, b: %v: want exactly one serialization failure", errA, errB)
			}
			loser = r
		}
		if loser == "" {
			t.Fatal("both transactions of a write skew committed under SERIALIZABLE")
		}
		if rows := env.pgOrders(t, loser); len(rows) != 0 {
			t.Fatalf("the failed transaction committed rows %q", rows)
		}
		if h, err := pgCheckHistory(ctx, env.pool, loser); err != nil || len(h) != 0 {
			t.Fatalf("the failed transaction committed its fence check: %+v, %v", h, err)
		}
	})

	t.Run("write skew, retried: both commit", func(t *testing.T) {
		fence := pgfence.New(env.pool, pgfence.WithIsolation(pgx.Serializable))
		calls, errA, errB := writeSkew(t, fence, "retry")
		if errA != nil || errB != nil {
			t.Fatalf("a: %v, b: %v", errA, errB)
		}
		if calls < 3 {
			t.Fatalf("the functions ran %d times: no transaction was retried", calls)
		}
		for _, r := range []string{"retry-a", "retry-b"} {
			if rows := env.pgOrders(t, r); len(rows) != 1 {
				t.Fatalf("%s: rows %q, want one", r, rows)
			}
			if h, err := pgCheckHistory(ctx, env.pool, r); err != nil || len(h) != 1 {
				t.Fatalf("%s: history %+v, %v, want one check", r, h, err)
			}
		}
	})
}

// The fencing.Store contract on PostgreSQL: through fencing.Fence, through a
// version that moved (ErrConflict), and through the fenced HTTP store with
// concurrent clients.
func TestPostgresStoreServesFencingFenceAndHTTPStore(t *testing.T) {
	env := pgStart(t)
	ctx := context.Background()
	pg := pgfence.New(env.pool)

	t.Run("fencing.Fence", func(t *testing.T) {
		store := pg.Store("store-fence", "fence-test")
		f := fencing.New(store)
		steps := []struct {
			tok       fencing.Token
			value     string
			wantStale bool
		}{
			{fencing.Token{Value: 3, LeaseUID: "a"}, "v3", false},
			{fencing.Token{Value: 3}, "v3 again", false},
			{fencing.Token{Value: 2, LeaseUID: "a"}, "late", true},
			{fencing.Token{Value: 3, LeaseUID: "b"}, "other lease", true},
			{fencing.Token{Value: 4, LeaseUID: "b"}, "v4", false},
		}
		want := ""
		for i, s := range steps {
			err := f.WriteToken(ctx, s.tok, []byte(s.value))
			if s.wantStale != errors.Is(err, fencing.ErrStaleToken) || (!s.wantStale && err != nil) {
				t.Fatalf("step %d (%s): %v", i, s.tok, err)
			}
			if !s.wantStale {
				want = s.value
			}
			tok, value, _, err := store.Load(ctx)
			if err != nil || string(value) != want {
				t.Fatalf("step %d: loaded %q, %v, want %q", i, value, err, want)
			}
			if i == 1 && tok.LeaseUID != "a" {
				t.Fatalf("an equal token without UID dropped the stored UID: %+v", tok)
			}
		}
		h, err := pgCheckHistory(ctx, env.pool, "store-fence")
		if err != nil || len(h) != 3 || h[0].Holder != "fence-test" {
			t.Fatalf("history %+v, %v: want 3 checks by fence-test", h, err)
		}
	})

	t.Run("a version that moved is a conflict and commits nothing", func(t *testing.T) {
		store := pg.Store("store-conflict", "w")
		_, _, v0, err := store.Load(ctx)
		if err != nil || v0 != "0" {
			t.Fatalf("a fresh resource loads version %q, %v", v0, err)
		}
		if err := store.Commit(ctx, v0, fencing.Token{Value: 1}, []byte("first")); err != nil {
			t.Fatal(err)
		}
		err = store.Commit(ctx, v0, fencing.Token{Value: 2}, []byte("second"))
		if !errors.Is(err, fencing.ErrConflict) {
			t.Fatalf("commit at an old version: %v, want ErrConflict", err)
		}
		tok, value, v1, err := store.Load(ctx)
		if err != nil || tok.Value != 1 || string(value) != "first" || v1 != "1" {
			t.Fatalf("after the conflict: %+v %q version %s, %v", tok, value, v1, err)
		}
		if h, err := pgCheckHistory(ctx, env.pool, "store-conflict"); err != nil || len(h) != 1 {
			t.Fatalf("history %+v, %v: the conflicting commit left a check", h, err)
		}
	})

	t.Run("httpstore with concurrent writers", func(t *testing.T) {
		const resource = "store-http"
		hs := httptest.NewServer(httpstore.NewServer(pg.Store(resource, "httpstore")))
		defer hs.Close()
		var wg sync.WaitGroup
		var accepted, stale atomic.Int64
		var maxAccepted atomic.Int64
		errs := make(chan error, 100)
		for w := 0; w < 5; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				c := httpstore.NewClient(hs.URL, fmt.Sprintf("pod-%d", w))
				for i := 0; i < 12; i++ {
					tok := int64((w*7 + i*3) % 10)
					err := c.WriteToken(ctx, fencing.Token{Value: tok, LeaseUID: "lease"}, []byte(fmt.Sprintf("pod-%d:%d", w, i)))
					switch {
					case err == nil:
						accepted.Add(1)
						for m := maxAccepted.Load(); tok > m && !maxAccepted.CompareAndSwap(m, tok); m = maxAccepted.Load() {
						}
					case errors.Is(err, fencing.ErrStaleToken):
						stale.Add(1)
					default:
						errs <- err
					}
				}
			}(w)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		got, _, err := httpstore.NewClient(hs.URL, "reader").ReadToken(ctx)
		if err != nil || got.Value != maxAccepted.Load() {
			t.Fatalf("the HTTP store reads %+v, %v; highest accepted %d", got, err, maxAccepted.Load())
		}
		h, err := pgCheckHistory(ctx, env.pool, resource)
		if err != nil || int64(len(h)) != accepted.Load() {
			t.Fatalf("history %d rows, %v; %d accepted", len(h), err, accepted.Load())
		}
		if stale.Load() == 0 {
			t.Fatal("no write was stale: the mix did not exercise the fence")
		}
	})
}

// Migrate is idempotent and safe to run from every replica at once, and a
// second run keeps the data.
func TestPostgresMigrateIsIdempotentAndConcurrentSafe(t *testing.T) {
	env := pgStart(t) // migrated once already
	ctx := context.Background()
	if err := pgfence.New(env.pool).Do(ctx, "kept", fencing.Token{Value: 4}, "", pgInsertOrder("kept", 4, "kept")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func(i int) { defer wg.Done(); errs[i] = pgfence.Migrate(ctx, env.pool) }(i)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if got := env.pgStored(t, "kept"); got.Value != 4 {
		t.Fatalf("stored %d after migrating again, want 4", got.Value)
	}
	if h, err := pgCheckHistory(ctx, env.pool, "kept"); err != nil || len(h) != 1 {
		t.Fatalf("history %+v, %v", h, err)
	}
}
