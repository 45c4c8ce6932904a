package main

import (
	"context"
	"fmt"
	"path/filepath"

	goredis "github.com/redis/go-redis/v9"

	redisfence "github.com/elector-sidecar/elector-sidecar/pkg/fencing/redis"
	"github.com/elector-sidecar/elector-sidecar/test/framework/dbserver"
)

// chaosResource names the fenced resource in the databases.
const chaosResource = "chaos"

// openRedis starts a throwaway redis-server and a Redis fence on it,
// initialised once here (the fence fails closed without its token key).
func openRedis(ctx context.Context, dir string) (*backend, error) {
	srv, err := dbserver.StartRedis(ctx, dbserver.Options{Dir: filepath.Join(dir, "redis")})
	if err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	// No client-side retries: a command whose connection broke in a restart
	// fails (an unknown outcome the soak counts) instead of being sent again.
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr, MaxRetries: -1})
	// The soak reconciles every accepted write with the history: keep it whole
	// (the fence's default trims it to about redisfence.DefaultHistoryLimit).
	fence := redisfence.New(client, chaosResource, redisfence.WithWriter("chaos-httpstore"), redisfence.WithHistoryLimit(0))
	if _, err := fence.Init(ctx); err != nil {
		_ = client.Close()
		_ = srv.Stop()
		return nil, err
	}
	keys := fence.Keys()
	return &backend{
		kind:     storeRedis,
		addr:     srv.Addr,
		name:     "Redis",
		describe: fmt.Sprintf("Redis fence (pkg/fencing/redis, Lua script) on redis-server %s, keys %s %s %s", srv.Addr, keys.Token, keys.Value, keys.History),
		store:    fence,
		restart:  restartServer(srv),
		history: func(ctx context.Context) ([]historyRow, error) {
			entries, err := fence.History(ctx) // XRANGE history - +
			if err != nil {
				return nil, err
			}
			rows := make([]historyRow, len(entries))
			for i, e := range entries {
				rows[i] = historyRow{ID: e.ID, Token: e.Token.Value, LeaseUID: e.Token.LeaseUID, Writer: e.Writer}
			}
			return rows, nil
		},
		close: func() {
			_ = client.Close()
			_ = srv.Stop()
		},
	}, nil
}
