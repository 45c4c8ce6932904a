package main

import (
	"context"
	"fmt"
	"strconv"

	pgfence "github.com/elector-sidecar/elector-sidecar/pkg/fencing/postgres"
	"github.com/elector-sidecar/elector-sidecar/test/framework/dbserver"
	"github.com/elector-sidecar/elector-sidecar/test/framework/pgstore"
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
	store := pgstore.New(srv.URL, demoResource, "demo-store", 4)
	if err := store.Migrate(ctx); err != nil {
		_ = srv.Stop()
		return nil, err
	}
	query := "SELECT id, token, lease_uid, holder, committed_at FROM elector_fence_history WHERE resource = 'demo' ORDER BY id"
	return &dbStore{
		name:     "PostgreSQL",
		describe: fmt.Sprintf("PostgreSQL at %s, pkg/fencing/postgres (each commit runs elector_fence('demo', token, lease_uid, holder) and writes the value in one transaction; every accepted write adds a row to elector_fence_history, bounded to about %d rows per resource)", srv.Addr, pgfence.DefaultHistoryKeep),
		query:    query,
		store:    store,
		history: func(ctx context.Context) ([]historyRow, error) {
			entries, err := store.History(ctx)
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
			store.Close()
			_ = srv.Stop()
		},
	}, nil
}
