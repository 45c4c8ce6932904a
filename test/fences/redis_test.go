package fences

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	"github.com/elector-sidecar/elector-sidecar/pkg/fencing/httpstore"
	redisfence "github.com/elector-sidecar/elector-sidecar/pkg/fencing/redis"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
	"github.com/elector-sidecar/elector-sidecar/test/framework/dbserver"
)

// The Redis fence (pkg/fencing/redis) against a real redis-server: the Lua
// script is the fence, so everything here runs it in Redis.

// Steps of one fence, in order, each checked against what Redis then holds.
func TestRedisFenceAppliesTheFencingRule(t *testing.T) {
	srv := dbserver.Redis(t)
	client := redisClient(t, srv.Addr)
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
		{"lower token is stale and names the stored token", []step{
			{tok: fencing.Token{Value: 7, LeaseUID: "a"}, wantStored: fencing.Token{Value: 7, LeaseUID: "a"}},
			{tok: fencing.Token{Value: 6, LeaseUID: "a"}, wantStale: &fencing.StaleTokenError{Token: 6, Highest: 7, LeaseUID: "a", HighestLeaseUID: "a"}, wantStored: fencing.Token{Value: 7, LeaseUID: "a"}},
			{tok: fencing.Token{Value: 0}, wantStale: &fencing.StaleTokenError{Token: 0, Highest: 7, HighestLeaseUID: "a"}, wantStored: fencing.Token{Value: 7, LeaseUID: "a"}},
		}},
		{"same value under another lease is stale", []step{
			{tok: fencing.Token{Value: 7, LeaseUID: "a"}, wantStored: fencing.Token{Value: 7, LeaseUID: "a"}},
			{tok: fencing.Token{Value: 7, LeaseUID: "b"}, wantStale: &fencing.StaleTokenError{Token: 7, Highest: 7, LeaseUID: "b", HighestLeaseUID: "a"}, wantStored: fencing.Token{Value: 7, LeaseUID: "a"}},
		}},
		{"an equal value without a UID keeps the stored UID", []step{
			{tok: fencing.Token{Value: 7, LeaseUID: "a"}, wantStored: fencing.Token{Value: 7, LeaseUID: "a"}},
			{tok: fencing.Token{Value: 7}, wantStored: fencing.Token{Value: 7, LeaseUID: "a"}},
		}},
		{"a higher value under another lease is accepted and its UID recorded", []step{
			{tok: fencing.Token{Value: 7, LeaseUID: "a"}, wantStored: fencing.Token{Value: 7, LeaseUID: "a"}},
			{tok: fencing.Token{Value: 8, LeaseUID: "b"}, wantStored: fencing.Token{Value: 8, LeaseUID: "b"}},
			{tok: fencing.Token{Value: 9}, wantStored: fencing.Token{Value: 9}},
		}},
		{"an unknown stored UID falls back to the value", []step{
			{tok: fencing.Token{Value: 4}, wantStored: fencing.Token{Value: 4}},
			{tok: fencing.Token{Value: 4, LeaseUID: "b"}, wantStored: fencing.Token{Value: 4, LeaseUID: "b"}},
		}},
		{"tokens above 2^53 compare exactly", []step{
			{tok: fencing.Token{Value: 1<<62 + 1}, wantStored: fencing.Token{Value: 1<<62 + 1}},
			{tok: fencing.Token{Value: 1 << 62}, wantStale: &fencing.StaleTokenError{Token: 1 << 62, Highest: 1<<62 + 1}, wantStored: fencing.Token{Value: 1<<62 + 1}},
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := redisNewFence(t, client, fmt.Sprintf("rule-%d", i))
			var accepted int
			var value string
			for j, s := range tt.steps {
				next := fmt.Sprintf("step %d", j)
				err := f.Set(ctx, s.tok, "writer", []byte(next))
				if s.wantStale != nil {
					redisWantStale(t, err, *s.wantStale)
				} else if err != nil {
					t.Fatalf("step %d: Set(%v): %v", j, s.tok, err)
				} else {
					accepted++
					value = next
				}
				stored, got, version, err := f.Load(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if stored != s.wantStored || string(got) != value || version != strconv.Itoa(accepted) {
					t.Fatalf("step %d: stored %v %q version %s, want %v %q version %d", j, stored, got, version, s.wantStored, value, accepted)
				}
			}
			if _, err := redisCheckHistory(ctx, f); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A random sequence of tokens (small values, UIDs "", a, b) through Redis and
// through pkg/fencing's Accept: the same decision and the same stored token
// at every step.
func TestRedisFenceAgreesWithAcceptOnRandomTokens(t *testing.T) {
	srv := dbserver.Redis(t)
	ctx := context.Background()
	f := redisNewFence(t, redisClient(t, srv.Addr), "agree")
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	uids := []string{"", "a", "b"}
	var model fencing.Token
	for i := 0; i < 300; i++ {
		tok := fencing.Token{Value: int64(rng.Intn(6)), LeaseUID: uids[rng.Intn(len(uids))]}
		want, wantErr := fencing.Accept(model, tok)
		err := f.Set(ctx, tok, "w", []byte(strconv.Itoa(i)))
		if (err == nil) != (wantErr == nil) || (err != nil && !errors.Is(err, fencing.ErrStaleToken)) {
			t.Fatalf("seed %d step %d: stored %v, Set(%v) = %v, Accept says %v", seed, i, model, tok, err, wantErr)
		}
		if wantErr != nil {
			var ste *fencing.StaleTokenError
			errors.As(wantErr, &ste)
			redisWantStale(t, err, *ste)
			continue
		}
		model = want
		stored, _, _, err := f.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if stored != model {
			t.Fatalf("seed %d step %d: Redis stored %v after %v, Accept records %v", seed, i, stored, tok, model)
		}
	}
	if _, err := redisCheckHistory(ctx, f); err != nil {
		t.Fatal(err)
	}
}

// Writers racing with mixed tokens: every write is either accepted or stale
// against a higher token; the final stored token is the highest accepted,
// the value is the last accepted write's, and Redis's history stream holds
// exactly the accepted writes with tokens that never go down.
func TestRedisFenceConcurrentWritersWithMixedTokens(t *testing.T) {
	srv := dbserver.Redis(t)
	ctx := context.Background()
	const writers, writes = 6, 60
	f := redisNewFence(t, redisClient(t, srv.Addr), "race")
	type acceptedWrite struct {
		tok   fencing.Token
		value string
	}
	var (
		mu       sync.Mutex
		accepted = map[string]acceptedWrite{} // by history entry ID
		stale    int
		errs     []error
	)
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			client := redisClient(t, srv.Addr) // a connection of its own, like a process
			fw := redisfence.New(client, "race")
			rng := rand.New(rand.NewSource(int64(w)))
			for i := 0; i < writes; i++ {
				// Tokens drift upwards with the write number, with jitter, so
				// writers overtake each other both ways.
				tok := fencing.Token{Value: int64(i/4 + rng.Intn(5)), LeaseUID: "lease-1"}
				value := fmt.Sprintf("w%d-%d", w, i)
				res, err := fw.SetResult(ctx, tok, fmt.Sprintf("writer-%d", w), []byte(value))
				mu.Lock()
				var ste *fencing.StaleTokenError
				switch {
				case err == nil:
					accepted[res.HistoryID] = acceptedWrite{tok, value}
				case errors.As(err, &ste) && ste.Highest > tok.Value:
					stale++
				default:
					errs = append(errs, fmt.Errorf("writer %d token %v: %v", w, tok, err))
				}
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	h, err := redisCheckHistory(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != len(accepted) || len(accepted)+stale != writers*writes {
		t.Fatalf("%d history entries, %d accepted, %d stale, %d writes", len(h), len(accepted), stale, writers*writes)
	}
	var highest int64
	for _, e := range h {
		a, ok := accepted[e.ID]
		if !ok || a.tok != e.Token {
			t.Fatalf("history entry %+v is not an accepted write (%+v)", e, a)
		}
		highest = max(highest, a.tok.Value)
	}
	stored, value, _, err := f.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if last := accepted[h[len(h)-1].ID]; stored.Value != highest || string(value) != last.value {
		t.Fatalf("stored %v %q, want the highest accepted token %d and the last accepted value %q", stored, value, highest, last.value)
	}
	if stale == 0 {
		t.Fatalf("no write was stale in %d racing writes: the test did not race", writers*writes)
	}
	t.Logf("%d accepted, %d stale, highest token %d", len(accepted), stale, highest)
}

// The script as an app in another language uses it: plain EVAL of
// fence.lua's text (redis-cli, and a raw EVAL from a second client), on the
// same keys as the Go fence.
func TestRedisFenceScriptLoadedByAnotherClientWithPlainEval(t *testing.T) {
	srv := dbserver.Redis(t)
	ctx := context.Background()
	f := redisNewFence(t, redisClient(t, srv.Addr), "polyglot")
	k := f.Keys()
	if err := f.Set(ctx, fencing.Token{Value: 5, LeaseUID: "lease-a"}, "go-app", []byte("from go")); err != nil {
		t.Fatal(err)
	}

	// A raw EVAL from another client, as any Redis client library would send it.
	other := redisClient(t, srv.Addr)
	eval := func(args ...any) (any, error) {
		return other.Do(ctx, append([]any{"EVAL", redisfence.ScriptSource, 3, k.Token, k.Value, k.History}, args...)...).Result()
	}
	if _, err := eval(4, "lease-a", "py-app", "stale"); err == nil || err.Error() != "STALE token=4 stored=5 uid=lease-a" {
		t.Fatalf("EVAL with token 4: got %v, want the error reply STALE token=4 stored=5 uid=lease-a", err)
	}
	reply, err := eval(6, "lease-a", "py-app", "from eval")
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := reply.([]any); !ok || len(r) != 4 || r[0] != "6" || r[1] != "lease-a" || r[2] != "2" {
		t.Fatalf("EVAL with token 6: reply %v, want [6 lease-a 2 <id>]", reply)
	}

	// redis-cli, another program altogether.
	cli := func(args ...string) string {
		host, port, _ := strings.Cut(srv.Addr, ":")
		cmd := exec.CommandContext(ctx, "redis-cli", append([]string{"-h", host, "-p", port, "EVAL", redisfence.ScriptSource, "3", k.Token, k.Value, k.History}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli: %v: %s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if out := cli("5", "lease-a", "sh-app", "stale"); out != "STALE token=5 stored=6 uid=lease-a" {
		t.Fatalf("redis-cli EVAL with token 5: %q", out)
	}
	if out := cli("6", "", "sh-app", "from redis-cli"); !strings.HasPrefix(out, "6\nlease-a\n3\n") {
		t.Fatalf("redis-cli EVAL with the equal token 6 and no UID: %q, want 6, the kept UID lease-a, version 3", out)
	}

	// The Go side sees what the others wrote, and their history.
	err = f.Set(ctx, fencing.Token{Value: 5, LeaseUID: "lease-a"}, "go-app", []byte("late"))
	redisWantStale(t, err, fencing.StaleTokenError{Token: 5, Highest: 6, LeaseUID: "lease-a", HighestLeaseUID: "lease-a"})
	_, value, _, err := f.Load(ctx)
	if err != nil || string(value) != "from redis-cli" {
		t.Fatalf("value %q, %v; want the redis-cli write", value, err)
	}
	h, err := redisCheckHistory(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	var writers []string
	for _, e := range h {
		writers = append(writers, e.Writer)
	}
	if got := strings.Join(writers, ","); got != "go-app,py-app,sh-app" {
		t.Fatalf("history writers %s", got)
	}
}

// Bad input reaches the script only from other clients (the Go side rejects
// it before any call); the script answers INVALID and writes nothing.
func TestRedisFenceScriptRejectsBadInput(t *testing.T) {
	srv := dbserver.Redis(t)
	ctx := context.Background()
	client := redisClient(t, srv.Addr)
	f := redisNewFence(t, client, "bad")
	if err := f.Set(ctx, fencing.Token{Value: 3, LeaseUID: "a"}, "w", []byte("good")); err != nil {
		t.Fatal(err)
	}
	k := f.Keys()
	if err := client.Set(ctx, "bad:plain-string", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		keys []string
		args []any
		want string
	}{
		{"negative token", []string{k.Token, k.Value, k.History}, []any{-1, "a", "w", "v"}, `INVALID token "-1"`},
		{"non-integer token", []string{k.Token, k.Value, k.History}, []any{"4.5", "a", "w", "v"}, `INVALID token "4.5"`},
		{"token above int64", []string{k.Token, k.Value, k.History}, []any{"9223372036854775808", "a", "w", "v"}, "INVALID token"},
		{"empty key", []string{k.Token, "", k.History}, []any{4, "a", "w", "v"}, "INVALID key 2 is empty"},
		{"two keys", []string{k.Token, k.Value}, []any{4, "a", "w", "v"}, "INVALID want 3 keys"},
		{"same key twice", []string{k.Token, k.Value, k.Value}, []any{4, "a", "w", "v"}, "INVALID the token, value and history keys must differ"},
		{"too few arguments", []string{k.Token, k.Value, k.History}, []any{4, "a", "w"}, "INVALID want 4 to 6 arguments"},
		{"bad version", []string{k.Token, k.Value, k.History}, []any{4, "a", "w", "v", "x"}, `INVALID version "x"`},
		{"history key of the wrong type", []string{k.Token, k.Value, "bad:plain-string"}, []any{4, "a", "w", "v"}, "INVALID bad:plain-string holds a string, not a stream"},
		{"missing token key", []string{"bad:nothing", k.Value, k.History}, []any{4, "a", "w", "v"}, "MISSING bad:nothing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := client.Eval(ctx, redisfence.ScriptSource, tt.keys, tt.args...).Err()
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error reply starting %q", err, tt.want)
			}
			if errors.Is(redisfence.ParseError(err, fencing.Token{Value: 4}), fencing.ErrStaleToken) {
				t.Fatalf("%v parses as a stale token", err)
			}
			stored, value, version, err := f.Load(ctx)
			if err != nil || stored != (fencing.Token{Value: 3, LeaseUID: "a"}) || string(value) != "good" || version != "1" {
				t.Fatalf("after bad input: %v %q %s %v, want the fence unchanged", stored, value, version, err)
			}
		})
	}
	if _, err := redisCheckHistory(ctx, f); err != nil {
		t.Fatal(err)
	}
}

// With appendonly, a Redis restart keeps the highest token (and its UID, the
// value and the history); the script cache is empty after the restart, so
// Set falls back from EVALSHA to EVAL.
func TestRedisFenceRestartKeepsTheHighestToken(t *testing.T) {
	srv := dbserver.Redis(t)
	ctx := context.Background()
	client := redisClient(t, srv.Addr)
	f := redisNewFence(t, client, "restart")
	if err := f.Set(ctx, fencing.Token{Value: 9, LeaseUID: "a"}, "leader", []byte("before")); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := framework.Eventually(ctx, framework.PollInterval, 10*time.Second, "client reconnects", func(ctx context.Context) error {
		return client.Ping(ctx).Err()
	}); err != nil {
		t.Fatal(err)
	}
	known, err := client.ScriptExists(ctx, goredis.NewScript(redisfence.ScriptSource).Hash()).Result()
	if err != nil || known[0] {
		t.Fatalf("script cache after restart: %v %v; want the script unknown", known, err)
	}
	err = f.Set(ctx, fencing.Token{Value: 8, LeaseUID: "a"}, "paused-leader", []byte("stale"))
	redisWantStale(t, err, fencing.StaleTokenError{Token: 8, Highest: 9, LeaseUID: "a", HighestLeaseUID: "a"})
	err = f.Set(ctx, fencing.Token{Value: 9, LeaseUID: "b"}, "reissued", []byte("stale"))
	redisWantStale(t, err, fencing.StaleTokenError{Token: 9, Highest: 9, LeaseUID: "b", HighestLeaseUID: "a"})
	if err := f.Set(ctx, fencing.Token{Value: 10, LeaseUID: "a"}, "next-leader", []byte("after")); err != nil {
		t.Fatal(err)
	}
	h, err := redisCheckHistory(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 2 || h[0].Writer != "leader" || h[1].Writer != "next-leader" {
		t.Fatalf("history after restart: %+v", h)
	}
}

// A Redis that lost its data (a restart without persistence, FLUSHALL, an
// eviction) must not read as "highest token 0": the fence fails closed
// until its setup runs Init again.
func TestRedisFenceFailsClosedWhenItsStateIsLost(t *testing.T) {
	srv := dbserver.Redis(t)
	ctx := context.Background()
	client := redisClient(t, srv.Addr)
	f := redisNewFence(t, client, "lost")
	if err := f.Set(ctx, fencing.Token{Value: 9}, "leader", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := client.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.Set(ctx, fencing.Token{Value: 1}, "stale-leader", []byte("stale")); !errors.Is(err, redisfence.ErrStateMissing) {
		t.Fatalf("Set after the state was lost: %v, want ErrStateMissing", err)
	}
	if _, _, _, err := f.Load(ctx); !errors.Is(err, redisfence.ErrStateMissing) {
		t.Fatalf("Load after the state was lost: %v, want ErrStateMissing", err)
	}
	if n, err := client.Exists(ctx, f.Keys().Token, f.Keys().Value, f.Keys().History).Result(); err != nil || n != 0 {
		t.Fatalf("%d keys exist after the refused write (%v); want none", n, err)
	}
	if err := fencing.New(f).Write(ctx, 1, []byte("stale")); !errors.Is(err, redisfence.ErrStateMissing) {
		t.Fatalf("fencing.Fence over the lost state: %v, want ErrStateMissing", err)
	}
}

// The fencing.Store contract: fencing.Fence drives Load/Commit, Commit
// refuses a moved version with ErrConflict, and the HTTP store serves Redis.
func TestRedisFenceIsAStoreForFencingFenceAndHTTPStore(t *testing.T) {
	srv := dbserver.Redis(t)
	ctx := context.Background()
	client := redisClient(t, srv.Addr)

	t.Run("commit at a moved version is a conflict", func(t *testing.T) {
		f := redisNewFence(t, client, "store-cas")
		_, _, version, err := f.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Commit(ctx, version, fencing.Token{Value: 1}, []byte("first")); err != nil {
			t.Fatal(err)
		}
		if err := f.Commit(ctx, version, fencing.Token{Value: 2}, []byte("second")); !errors.Is(err, fencing.ErrConflict) {
			t.Fatalf("Commit at the old version %s: %v, want ErrConflict", version, err)
		}
		_, _, version, _ = f.Load(ctx)
		err = f.Commit(ctx, version, fencing.Token{Value: 0}, []byte("lower"))
		redisWantStale(t, err, fencing.StaleTokenError{Token: 0, Highest: 1})
		if _, v, _, _ := f.Load(ctx); string(v) != "first" {
			t.Fatalf("value %q after a conflict and a stale commit, want first", v)
		}
	})

	t.Run("fencing.Fence with racing writers", func(t *testing.T) {
		f := redisNewFence(t, client, "store-fence", redisfence.WithWriter("fencing.Fence"))
		fence := fencing.New(f)
		// fencing.Fence gives up after DefaultMaxAttempts lost races
		// (ErrConflict); a give-up writes nothing, every other write lands.
		var wg sync.WaitGroup
		errs := make(chan error, 3*20)
		for w := 0; w < 3; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					errs <- fence.WriteToken(ctx, fencing.Token{Value: 4, LeaseUID: "a"}, []byte(fmt.Sprintf("w%d-%d", w, i)))
				}
			}(w)
		}
		wg.Wait()
		close(errs)
		landed := 0
		for err := range errs {
			switch {
			case err == nil:
				landed++
			case !errors.Is(err, fencing.ErrConflict):
				t.Fatal(err)
			}
		}
		if landed == 0 {
			t.Fatal("no write landed")
		}
		err := fence.WriteToken(ctx, fencing.Token{Value: 3, LeaseUID: "a"}, []byte("stale"))
		redisWantStale(t, err, fencing.StaleTokenError{Token: 3, Highest: 4, LeaseUID: "a", HighestLeaseUID: "a"})
		h, err := redisCheckHistory(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if len(h) != landed || h[0].Writer != "fencing.Fence" {
			t.Fatalf("%d history entries for %d writes that landed, first %+v", len(h), landed, h[0])
		}
		t.Logf("%d of 60 racing writes landed (the rest gave up after %d lost races)", landed, fencing.DefaultMaxAttempts)
	})

	t.Run("httpstore server over Redis", func(t *testing.T) {
		f := redisNewFence(t, client, "store-http")
		hs := httptest.NewServer(httpstore.NewServer(f))
		defer hs.Close()
		c := httpstore.NewClient(hs.URL, "pod-a")
		if err := c.WriteToken(ctx, fencing.Token{Value: 5, LeaseUID: "a"}, []byte("over http")); err != nil {
			t.Fatal(err)
		}
		err := c.WriteToken(ctx, fencing.Token{Value: 5, LeaseUID: "b"}, []byte("other lease"))
		redisWantStale(t, err, fencing.StaleTokenError{Token: 5, Highest: 5, LeaseUID: "b", HighestLeaseUID: "a"})
		err = c.Write(ctx, 4, []byte("lower"))
		redisWantStale(t, err, fencing.StaleTokenError{Token: 4, Highest: 5, HighestLeaseUID: "a"})
		// Read through HTTP, and straight from Redis.
		tok, v, err := c.ReadToken(ctx)
		if err != nil || tok != (fencing.Token{Value: 5, LeaseUID: "a"}) || string(v) != "over http" {
			t.Fatalf("GET /value: %v %q %v", tok, v, err)
		}
		if v, err := client.Get(ctx, f.Keys().Value).Result(); err != nil || v != "over http" {
			t.Fatalf("Redis value key: %q %v", v, err)
		}
	})
}

// README "Fencing in Redis": the Go snippet is the body between the markers
// below, run against the real server; the redis-cli commands run through
// bash with redis-cli pointed at it, from the repository root.
func TestRedisReadmeSnippetsRunAgainstARealServer(t *testing.T) {
	ctx := context.Background()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var goBlocks, consoleBlocks []framework.CodeBlock
	for _, b := range framework.MarkdownCodeBlocks(string(readme)) {
		if !b.Under("Fencing in Redis") {
			continue
		}
		switch b.Lang {
		case "go":
			goBlocks = append(goBlocks, b)
		case "console":
			consoleBlocks = append(consoleBlocks, b)
		default:
			t.Fatalf("README %s: only go and console blocks are run under \"Fencing in Redis\"", b.Where())
		}
	}
	if len(goBlocks) != 1 || len(consoleBlocks) != 1 {
		t.Fatalf("README \"Fencing in Redis\": want one go and one console block, found %d and %d", len(goBlocks), len(consoleBlocks))
	}

	t.Run("go", func(t *testing.T) {
		srv := dbserver.Redis(t)
		src, err := os.ReadFile("redis_test.go")
		if err != nil {
			t.Fatal(err)
		}
		_, snippet, _ := strings.Cut(string(src), "\t// README begin\n")
		snippet, _, _ = strings.Cut(snippet, "\t// README end")
		if got, want := redisNormalize(goBlocks[0].Code), redisNormalize(snippet); got != want {
			t.Fatalf("README %s differs from redisReadmeGo:\nREADME:\n%s\ntest:\n%s", goBlocks[0].Where(), got, want)
		}
		stale, err := redisReadmeGo(ctx, srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		if !stale {
			t.Fatal("the snippet's stale branch did not run for the paused leader's token")
		}
	})

	t.Run("redis-cli", func(t *testing.T) {
		srv := dbserver.Redis(t)
		host, port, _ := strings.Cut(srv.Addr, ":")
		for _, c := range framework.ConsoleCommands(consoleBlocks[0].Code) {
			// redis-cli is pointed at the test server; --no-raw prints what a terminal shows.
			script := fmt.Sprintf("redis-cli() { command redis-cli -h %s -p %s --no-raw \"$@\"; }\n%s\n", host, port, c.Command)
			cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
			cmd.Dir = root
			out, err := cmd.CombinedOutput()
			// redis-cli exits 0 on an error reply up to Redis 7.0, 1 in later versions.
			if wantsError := len(c.Output) > 0 && strings.HasPrefix(c.Output[0], "(error)"); err != nil && !wantsError {
				t.Fatalf("README %s, command %q: %v\n%s", consoleBlocks[0].Where(), c.Command, err, out)
			}
			got := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
			if len(got) != len(c.Output) {
				t.Fatalf("README %s, command %q: output\n%s\nwant\n%s", consoleBlocks[0].Where(), c.Command, out, strings.Join(c.Output, "\n"))
			}
			for i, want := range c.Output {
				// Stream entry IDs are times: any ID matches an ID.
				re := "^" + redisStreamID.ReplaceAllString(regexp.QuoteMeta(want), `\d+-\d+`) + "$"
				if !regexp.MustCompile(re).MatchString(got[i]) {
					t.Fatalf("README %s, command %q: line %d is %q, want %q", consoleBlocks[0].Where(), c.Command, i+1, got[i], want)
				}
			}
		}
	})
}

var redisStreamID = regexp.MustCompile(`\d{10,}-\d+`)

// redisReadmeGo is the README's Go snippet with what it needs around it: a
// /token answer of a leader (t), and a paused leader's older token after it.
// It reports whether the snippet took its stale branch for the old token.
func redisReadmeGo(ctx context.Context, addr string) (staleSeen bool, err error) {
	type tokenAnswer struct {
		Token    int64
		LeaseUID string
	}
	for _, t := range []tokenAnswer{{Token: 7, LeaseUID: "4f0c9b52"}, {Token: 6, LeaseUID: "4f0c9b52"}} {
		// README begin
		client := goredis.NewClient(&goredis.Options{Addr: addr}) // addr: "127.0.0.1:6379"
		fence := redisfence.New(client, "billing")                // keys {billing}:token, {billing}:value, {billing}:history
		if _, err := fence.Init(ctx); err != nil {                // once, at setup; Set fails closed without it
			return false, err
		}
		err := fence.Set(ctx, fencing.Token{Value: t.Token, LeaseUID: t.LeaseUID}, "pod-a", []byte("value"))
		if errors.Is(err, fencing.ErrStaleToken) { // *fencing.StaleTokenError: Highest is the token Redis holds
			// a newer leader has written: this process is stale and must stop
		}
		// README end
		_ = client.Close()
		var ste *fencing.StaleTokenError
		switch {
		case t.Token == 7 && err != nil:
			return false, fmt.Errorf("token 7: %w", err)
		case t.Token == 6 && errors.As(err, &ste) && ste.Highest == 7:
			staleSeen = true
		case t.Token == 6:
			return false, fmt.Errorf("token 6 after 7: %v, want a stale token naming 7", err)
		}
	}
	return staleSeen, nil
}

// redisNormalize compares code, not layout: white space runs count as one space.
func redisNormalize(s string) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return strings.Join(lines, "\n")
}
