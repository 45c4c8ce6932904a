package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	pgfence "github.com/elector-sidecar/elector-sidecar/pkg/fencing/postgres"
	redisfence "github.com/elector-sidecar/elector-sidecar/pkg/fencing/redis"
	"github.com/elector-sidecar/elector-sidecar/test/framework/pgstore"
)

// The soak reconciles every accepted write with the database's history, so
// its stores keep the whole history where the fences bound it by default:
// a history already longer than the default limit keeps every entry through
// the soak's commits.
func TestSoakStoresKeepTheWholeHistory(t *testing.T) {
	ctx := context.Background()
	t.Run("postgres", func(t *testing.T) {
		b, err := openBackend(ctx, storePostgres, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		defer b.close()
		const before = pgfence.DefaultHistoryKeep + 100
		err = b.store.(*pgstore.Store).With(ctx, func(c *pgx.Conn) error {
			_, err := c.Exec(ctx, "INSERT INTO elector_fence_history (resource, token) SELECT $1, 0 FROM generate_series(1, $2)", chaosResource, before)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		// History ids 10101 to 10300 pass 10240, a multiple of 1024, where
		// the fence prunes unless told to keep everything.
		soakCommits(ctx, t, b, 200)
		rows, err := b.history(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != before+200 {
			t.Fatalf("%d history rows, want all %d", len(rows), before+200)
		}
	})
	t.Run("redis", func(t *testing.T) {
		b, err := openBackend(ctx, storeRedis, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		defer b.close()
		client := goredis.NewClient(&goredis.Options{Addr: b.addr})
		defer func() { _ = client.Close() }()
		history := redisfence.KeysFor(chaosResource).History
		const before = redisfence.DefaultHistoryLimit + 200
		_, err = client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for i := 0; i < before; i++ {
				p.XAdd(ctx, &goredis.XAddArgs{Stream: history, Values: []string{"token", "0", "uid", "", "writer", "fill", "version", "0"}})
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		soakCommits(ctx, t, b, 3)
		if n, err := client.XLen(ctx, history).Result(); err != nil || n != before+3 {
			t.Fatalf("%d history entries (%v), want all %d", n, err, before+3)
		}
	})
}

// soakCommits writes n values through b's store, as the soak's writers do.
func soakCommits(ctx context.Context, t *testing.T, b *backend, n int) {
	t.Helper()
	f := fencing.New(b.store)
	for i := 0; i < n; i++ {
		if err := f.WriteToken(ctx, fencing.Token{Value: 1, LeaseUID: "lease"}, []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
}
