package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/elector-sidecar/elector-sidecar/test/framework/dbserver"
	"github.com/elector-sidecar/elector-sidecar/test/framework/pgstore"
)

// keepWholeHistorySQL turns the fence's history pruning off.
const keepWholeHistorySQL = "UPDATE elector_fence_settings SET history = true, history_keep = 0"

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
	store := pgstore.New(srv.URL, chaosResource, "chaos-httpstore", 8)
	if err := store.Migrate(ctx); err != nil {
		_ = srv.Stop()
		return nil, err
	}
	// The soak reconciles every accepted write with the history: keep it whole
	// (the fence's default keeps about pgfence.DefaultHistoryKeep rows).
	if err := store.With(ctx, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, keepWholeHistorySQL)
		return err
	}); err != nil {
		store.Close()
		_ = srv.Stop()
		return nil, fmt.Errorf("keep the whole fence history: %w", err)
	}
	return &backend{
		kind:     storePostgres,
		addr:     srv.Addr,
		url:      srv.URL,
		name:     "PostgreSQL",
		describe: fmt.Sprintf("PostgreSQL fence (pkg/fencing/postgres, elector_fence() in the commit's transaction) on %s, resource %q, history in elector_fence_history; synchronous_commit on, fsync off", srv.Addr, chaosResource),
		store:    store,
		restart:  restartServer(srv),
		history: func(ctx context.Context) ([]historyRow, error) {
			// SELECT id, token, lease_uid, holder FROM elector_fence_history WHERE resource = $1 ORDER BY id
			entries, err := store.History(ctx)
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
			store.Close()
			_ = srv.Stop()
		},
	}, nil
}
