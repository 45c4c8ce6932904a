package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/jackc/pgx/v5"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	pgfence "github.com/elector-sidecar/elector-sidecar/pkg/fencing/postgres"
	"github.com/elector-sidecar/elector-sidecar/test/framework/dbserver"
)

// benchUserTable is the user data both postgres paths write, one row per write.
const benchUserTable = `CREATE TABLE IF NOT EXISTS bench_user_data (
	id     bigserial PRIMARY KEY,
	writer int NOT NULL,
	seq    bigint NOT NULL,
	value  bytea NOT NULL
)`

const benchInsert = "INSERT INTO bench_user_data (writer, seq, value) VALUES ($1, $2, $3)"

// startPostgresTarget starts a throwaway PostgreSQL with the fence's
// migration and a user table. Every writer has its own connection (each
// writer is a closed loop, one transaction at a time); the fenced path is
// Fence.Do (BEGIN, SELECT elector_fence(...) and the INSERT in one batch;
// COMMIT), the plain path the same transaction without the check as
// pgx.BeginTxFunc sends it (BEGIN alone), the plain-batched path with BEGIN
// and the INSERT in one batch (the fenced path's round trips). All
// run with the fence's defaults (history on, pruned to
// pgfence.DefaultHistoryKeep rows).
func startPostgresTarget(ctx context.Context, dir string, writers int, history bool) (*fenceTarget, string, error) {
	name := "postgres"
	if !history {
		name = pgNoHistory
	}
	srv, err := dbserver.StartPostgres(ctx, dbserver.Options{Dir: filepath.Join(dir, name)})
	if err != nil {
		return nil, "", err
	}
	conns := make([]*pgx.Conn, writers)
	closeAll := func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close(context.Background())
			}
		}
		_ = srv.Stop()
	}
	for i := range conns {
		// synchronous_commit on (PostgreSQL's default, which dbserver keeps),
		// as a fence is deployed: a commit waits for its WAL write.
		if conns[i], err = pgx.Connect(ctx, srv.URL); err != nil {
			closeAll()
			return nil, "", err
		}
	}
	if err := pgfence.Migrate(ctx, conns[0]); err != nil {
		closeAll()
		return nil, "", err
	}
	if _, err := conns[0].Exec(ctx, benchUserTable); err != nil {
		closeAll()
		return nil, "", err
	}
	if _, err := conns[0].Exec(ctx, "UPDATE elector_fence_settings SET history = $1", history); err != nil {
		closeAll()
		return nil, "", err
	}
	var version, fsync, syncCommit string
	if err := conns[0].QueryRow(ctx, "SELECT current_setting('server_version'), current_setting('fsync'), current_setting('synchronous_commit')").Scan(&version, &fsync, &syncCommit); err != nil {
		closeAll()
		return nil, "", err
	}
	fences := make([]*pgfence.Fence, writers)
	for i, c := range conns {
		fences[i] = pgfence.New(c)
	}
	value := []byte("a value of about the size of a small record, 64 bytes long......")
	insert := func(ctx context.Context, tx pgx.Tx, w, i int) error {
		_, err := tx.Exec(ctx, benchInsert, w, i, value)
		return err
	}
	return &fenceTarget{
			db: name,
			fenced: func(ctx context.Context, w, i int) error {
				err := fences[w].Do(ctx, "bench", benchToken, fmt.Sprintf("writer-%d", w), func(tx pgx.Tx) error { return insert(ctx, tx, w, i) })
				if errors.Is(err, fencing.ErrStaleToken) {
					return fmt.Errorf("the bench's own token was rejected: %w", err)
				}
				return err
			},
			plain: func(ctx context.Context, w, i int) error {
				return pgx.BeginTxFunc(ctx, conns[w], pgx.TxOptions{}, func(tx pgx.Tx) error { return insert(ctx, tx, w, i) })
			},
			plainBatched: func(ctx context.Context, w, i int) error {
				b := &pgx.Batch{}
				b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted}) // Do's BEGIN
				b.Queue(benchInsert, w, i, value)
				br := conns[w].SendBatch(ctx, b)
				tx := br.Tx()
				if err := br.Close(); err != nil {
					_ = tx.Rollback(ctx)
					return err
				}
				return tx.Commit(ctx)
			},
			close: closeAll,
		}, fmt.Sprintf("PostgreSQL %s at %s (synchronous_commit %[4]s, fsync %[3]s, dbserver's throwaway setting: commits are written, not flushed to disk); fenced = postgres.Fence.Do (BEGIN, SELECT elector_fence('bench', 1, uid, holder) and INSERT one row in one round trip (a pgx batch); COMMIT; history %[5]s), plain = BEGIN; the same INSERT; COMMIT (pgx.BeginTxFunc: three round trips), plain-batched = BEGIN and the same INSERT in one batch; COMMIT (two, as fenced); one connection per writer",
			version, srv.Addr, fsync, syncCommit, map[bool]string{true: "on, default pruning", false: "off"}[history]), nil
}
