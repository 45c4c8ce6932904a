package fences

import (
	"context"
	"sync"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	redisfence "github.com/elector-sidecar/elector-sidecar/pkg/fencing/redis"
	"github.com/elector-sidecar/elector-sidecar/test/framework/dbserver"
)

// The history stream is bounded by default, for Go's Fence and for the
// script called from any language without a history limit: about
// DefaultHistoryLimit entries (XADD MAXLEN ~ keeps at most one more stream
// node, 100 entries by default). WithHistoryLimit(0) keeps every entry.
func TestRedisHistoryIsBoundedByDefault(t *testing.T) {
	srv := dbserver.Redis(t)
	ctx := context.Background()
	client := redisClient(t, srv.Addr)
	const writes = redisfence.DefaultHistoryLimit + 500
	const slack = 100 // stream-node-max-entries
	value := []byte("v")

	// The script pipelined, as a client in another language may send it.
	run := func(f *redisfence.Fence, args func(i int) []any) {
		t.Helper()
		k := f.Keys()
		for start := 0; start < writes; start += 1000 {
			_, err := client.Pipelined(ctx, func(p goredis.Pipeliner) error {
				for i := start; i < min(start+1000, writes); i++ {
					p.EvalSha(ctx, goredisScript.Hash(), []string{k.Token, k.Value, k.History}, args(i)...)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := goredisScript.Load(ctx, client).Err(); err != nil {
		t.Fatal(err)
	}
	length := func(f *redisfence.Fence) int64 {
		t.Helper()
		n, err := client.XLen(ctx, f.Keys().History).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	def := redisNewFence(t, client, "default")
	run(def, func(i int) []any { return []any{1, "lease", "other-language", value} })
	if n := length(def); n < redisfence.DefaultHistoryLimit || n > redisfence.DefaultHistoryLimit+slack {
		t.Fatalf("the script without a history limit left %d entries after %d writes, want about %d", n, writes, redisfence.DefaultHistoryLimit)
	}

	// Go's Fence without WithHistoryLimit, 8 writers.
	goDefault := redisNewFence(t, client, "go-default")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < writes; i += 8 {
				if err := goDefault.Set(ctx, fencing.Token{Value: 1}, "go", value); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := length(goDefault); n < redisfence.DefaultHistoryLimit || n > redisfence.DefaultHistoryLimit+slack {
		t.Fatalf("Fence.Set without a history limit left %d entries after %d writes, want about %d", n, writes, redisfence.DefaultHistoryLimit)
	}

	all := redisNewFence(t, client, "all", redisfence.WithHistoryLimit(0))
	run(all, func(int) []any { return []any{1, "lease", "go", value, "", 0} })
	if err := all.Set(ctx, fencing.Token{Value: 1}, "go", value); err != nil {
		t.Fatal(err)
	}
	// A Set with a limit would have trimmed whole nodes of the 10,501 entries.
	if n := length(all); n != writes+1 {
		t.Fatalf("history limit 0 kept %d of %d entries", n, writes+1)
	}
}

// goredisScript is fence.lua as go-redis loads it.
var goredisScript = goredis.NewScript(redisfence.ScriptSource)
