package fences

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	redisfence "github.com/elector-sidecar/elector-sidecar/pkg/fencing/redis"
)

// redisClient returns a go-redis client for srv, closed at the end of the test.
func redisClient(t testing.TB, addr string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// redisNewFence returns an initialised fence on a resource of its own.
func redisNewFence(t testing.TB, client goredis.Cmdable, resource string, opts ...redisfence.Option) *redisfence.Fence {
	t.Helper()
	f := redisfence.New(client, resource, opts...)
	created, err := f.Init(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !created {
		t.Fatalf("resource %q: the fence already existed", resource)
	}
	return f
}

// redisCheckHistory checks Redis's own record of the accepted writes: the
// tokens never go down, the versions count 1, 2, ... without a gap (no write
// was accepted without an entry), and the last entry is the stored token.
func redisCheckHistory(ctx context.Context, f *redisfence.Fence) ([]redisfence.Entry, error) {
	h, err := f.History(ctx)
	if err != nil {
		return nil, err
	}
	for i, e := range h {
		if e.Version != int64(i+1) {
			return h, fmt.Errorf("history entry %d (%s) has version %d, want %d", i, e.ID, e.Version, i+1)
		}
		if i > 0 && e.Token.Value < h[i-1].Token.Value {
			return h, fmt.Errorf("history went down: entry %d (%s) token %d after %d", i, e.ID, e.Token.Value, h[i-1].Token.Value)
		}
	}
	stored, _, version, err := f.Load(ctx)
	if err != nil {
		return h, err
	}
	if strconv.Itoa(len(h)) != version {
		return h, fmt.Errorf("%d history entries, but the fence is at version %s", len(h), version)
	}
	if len(h) > 0 && h[len(h)-1].Token != stored {
		return h, fmt.Errorf("last history entry %+v, stored token %+v", h[len(h)-1].Token, stored)
	}
	return h, nil
}

// redisWantStale fails unless err is a *fencing.StaleTokenError naming want.
func redisWantStale(t testing.TB, err error, want fencing.StaleTokenError) {
	t.Helper()
	var ste *fencing.StaleTokenError
	if !errors.As(err, &ste) || !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("got %v, want a *fencing.StaleTokenError", err)
	}
	if *ste != want {
		t.Fatalf("got %#v, want %#v", *ste, want)
	}
}
