package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
)

// These tests need no Redis: a go-redis hook answers every command the way
// the script's server side would (or records that a command was sent). The
// script itself runs against a real redis-server in test/fences.

// replyError is a Redis error reply as go-redis returns it.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// fakeRedis records the commands a client sends and answers them with reply.
type fakeRedis struct {
	mu    sync.Mutex
	sent  [][]any
	reply func(cmd goredis.Cmder)
}

func (f *fakeRedis) DialHook(goredis.DialHook) goredis.DialHook {
	return func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("fakeRedis: no dialing in unit tests")
	}
}

func (f *fakeRedis) ProcessHook(goredis.ProcessHook) goredis.ProcessHook {
	return func(_ context.Context, cmd goredis.Cmder) error {
		f.mu.Lock()
		f.sent = append(f.sent, cmd.Args())
		f.mu.Unlock()
		if f.reply != nil {
			f.reply(cmd)
		}
		return cmd.Err()
	}
}

func (f *fakeRedis) ProcessPipelineHook(goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(_ context.Context, cmds []goredis.Cmder) error {
		for _, cmd := range cmds {
			f.mu.Lock()
			f.sent = append(f.sent, cmd.Args())
			f.mu.Unlock()
			if f.reply != nil {
				f.reply(cmd)
			}
		}
		return nil
	}
}

func (f *fakeRedis) commands() [][]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]any(nil), f.sent...)
}

func newFake(t *testing.T, reply func(goredis.Cmder)) (*goredis.Client, *fakeRedis) {
	t.Helper()
	fake := &fakeRedis{reply: reply}
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	c.AddHook(fake)
	t.Cleanup(func() { _ = c.Close() })
	return c, fake
}

func TestBadInputIsRejectedBeforeAnyCommand(t *testing.T) {
	ctx := context.Background()
	client, fake := newFake(t, nil)
	good := New(client, "billing")
	tests := []struct {
		name string
		call func() error
	}{
		{"empty resource: Set", func() error { return New(client, "").Set(ctx, fencing.Token{Value: 1}, "a", nil) }},
		{"empty resource: Load", func() error { _, _, _, err := New(client, "").Load(ctx); return err }},
		{"empty resource: Init", func() error { _, err := New(client, "").Init(ctx); return err }},
		{"empty resource: History", func() error { _, err := New(client, "").History(ctx); return err }},
		{"nil client", func() error { return New(nil, "billing").Set(ctx, fencing.Token{Value: 1}, "a", nil) }},
		{"empty value key", func() error {
			return NewWithKeys(client, Keys{Token: "t", History: "h"}).Set(ctx, fencing.Token{Value: 1}, "a", nil)
		}},
		{"token key equals history key", func() error {
			return NewWithKeys(client, Keys{Token: "t", Value: "v", History: "t"}).Set(ctx, fencing.Token{Value: 1}, "a", nil)
		}},
		{"negative history limit", func() error {
			return New(client, "billing", WithHistoryLimit(-1)).Set(ctx, fencing.Token{Value: 1}, "a", nil)
		}},
		{"negative token", func() error { return good.Set(ctx, fencing.Token{Value: -1}, "a", nil) }},
		{"lease UID with a newline", func() error { return good.Set(ctx, fencing.Token{Value: 1, LeaseUID: "a\nb"}, "a", nil) }},
		{"commit without a version", func() error { return good.Commit(ctx, "", fencing.Token{Value: 1}, nil) }},
		{"commit with a non-integer version", func() error { return good.Commit(ctx, "v7", fencing.Token{Value: 1}, nil) }},
		{"commit with a negative version", func() error { return good.Commit(ctx, "-3", fencing.Token{Value: 1}, nil) }},
		{"commit with a negative token", func() error { return good.Commit(ctx, "3", fencing.Token{Value: -2}, nil) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want an error matching ErrInvalid", err)
			}
			if errors.Is(err, fencing.ErrStaleToken) {
				t.Fatalf("bad input reported as a stale token: %v", err)
			}
			if cmds := fake.commands(); len(cmds) != 0 {
				t.Fatalf("commands sent to Redis for bad input: %v", cmds)
			}
		})
	}
}

func TestScriptErrorRepliesMapToGoErrors(t *testing.T) {
	tok := fencing.Token{Value: 5, LeaseUID: "uid-b"}
	tests := []struct {
		name       string
		reply      error
		want       error // errors.Is target
		wantStale  *fencing.StaleTokenError
		wantSubstr string
	}{
		{
			name:      "lower token",
			reply:     replyError("STALE token=5 stored=7 uid=uid-a"),
			want:      fencing.ErrStaleToken,
			wantStale: &fencing.StaleTokenError{Token: 5, Highest: 7, LeaseUID: "uid-b", HighestLeaseUID: "uid-a"},
		},
		{
			name:      "same value under another lease",
			reply:     replyError("STALE token=5 stored=5 uid=uid-a"),
			want:      fencing.ErrStaleToken,
			wantStale: &fencing.StaleTokenError{Token: 5, Highest: 5, LeaseUID: "uid-b", HighestLeaseUID: "uid-a"},
		},
		{
			name:      "stored token without a lease UID",
			reply:     replyError("STALE token=5 stored=9 uid="),
			want:      fencing.ErrStaleToken,
			wantStale: &fencing.StaleTokenError{Token: 5, Highest: 9, LeaseUID: "uid-b"},
		},
		{
			name:      "stored lease UID with spaces runs to the end",
			reply:     replyError("STALE token=5 stored=9 uid=a b c"),
			want:      fencing.ErrStaleToken,
			wantStale: &fencing.StaleTokenError{Token: 5, Highest: 9, LeaseUID: "uid-b", HighestLeaseUID: "a b c"},
		},
		{name: "version moved", reply: replyError("CONFLICT version=4 expected=3"), want: fencing.ErrConflict, wantSubstr: "version=4 expected=3"},
		{name: "state missing", reply: replyError("MISSING {billing}:token: the fence state does not exist"), want: ErrStateMissing, wantSubstr: "{billing}:token"},
		{name: "bad argument", reply: replyError(`INVALID token "x" is not a non-negative 64-bit integer`), want: ErrInvalid, wantSubstr: `token "x"`},
		{name: "corrupt state", reply: replyError(`CORRUPT {billing}:token token "x"`), want: ErrCorrupt},
		{name: "malformed STALE is not a stale token", reply: replyError("STALE stored=banana"), wantSubstr: "malformed STALE"},
		{name: "other Redis error", reply: replyError("WRONGTYPE Operation against a key holding the wrong kind of value"), wantSubstr: "WRONGTYPE"},
		{name: "network error", reply: errors.New("dial tcp: connection refused"), wantSubstr: "connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client, _ := newFake(t, func(cmd goredis.Cmder) { cmd.SetErr(tt.reply) })
			err := New(client, "billing").Set(context.Background(), tok, "pod-b", []byte("v"))
			if err == nil {
				t.Fatal("Set succeeded on an error reply")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want an error matching %v", err, tt.want)
			}
			if tt.want != fencing.ErrStaleToken && errors.Is(err, fencing.ErrStaleToken) {
				t.Fatalf("%v reported as a stale token", err)
			}
			if tt.wantStale != nil {
				var ste *fencing.StaleTokenError
				if !errors.As(err, &ste) || *ste != *tt.wantStale {
					t.Fatalf("got %#v, want %#v", err, tt.wantStale)
				}
			}
			if !strings.Contains(err.Error(), tt.wantSubstr) {
				t.Fatalf("error %q does not contain %q", err, tt.wantSubstr)
			}
		})
	}
}

func TestSetSendsTheScriptWithKeysAndArguments(t *testing.T) {
	client, fake := newFake(t, func(cmd goredis.Cmder) {
		cmd.(*goredis.Cmd).SetVal([]any{"7", "uid-a", "3", "1-0"})
	})
	f := New(client, "billing", WithHistoryLimit(100))
	res, err := f.SetResult(context.Background(), fencing.Token{Value: 7, LeaseUID: "uid-a"}, "pod-a", []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	want := Result{Token: fencing.Token{Value: 7, LeaseUID: "uid-a"}, Version: 3, HistoryID: "1-0"}
	if res != want {
		t.Fatalf("got %+v, want %+v", res, want)
	}
	cmds := fake.commands()
	if len(cmds) != 1 {
		t.Fatalf("want one EVALSHA, got %v", cmds)
	}
	got := make([]string, len(cmds[0]))
	for i, a := range cmds[0] {
		if b, ok := a.([]byte); ok {
			got[i] = string(b)
		} else {
			got[i] = fmt.Sprint(a)
		}
	}
	wantArgs := []string{"evalsha", script.Hash(), "3", "{billing}:token", "{billing}:value", "{billing}:history", "7", "uid-a", "pod-a", "hello", "", "100"}
	if strings.Join(got, "|") != strings.Join(wantArgs, "|") {
		t.Fatalf("sent %q, want %q", got, wantArgs)
	}
}

func TestSetFallsBackToEvalWhenRedisDoesNotKnowTheScript(t *testing.T) {
	client, fake := newFake(t, func(cmd goredis.Cmder) {
		switch cmd.Name() {
		case "evalsha":
			cmd.SetErr(replyError("NOSCRIPT No matching script. Please use EVAL."))
		case "eval":
			cmd.(*goredis.Cmd).SetVal([]any{"1", "", "1", "1-0"})
		}
	})
	if err := New(client, "r").Set(context.Background(), fencing.Token{Value: 1}, "w", nil); err != nil {
		t.Fatal(err)
	}
	cmds := fake.commands()
	if len(cmds) != 2 || cmds[0][0] != "evalsha" || cmds[1][0] != "eval" || cmds[1][1] != ScriptSource {
		t.Fatalf("want EVALSHA then EVAL with ScriptSource, got %d commands: %v", len(cmds), names(cmds))
	}
}

func names(cmds [][]any) []any {
	var out []any
	for _, c := range cmds {
		out = append(out, c[0])
	}
	return out
}

func TestUnexpectedScriptRepliesAreErrors(t *testing.T) {
	for _, reply := range [][]any{
		{"7", "u", "3"},
		{"7", "u", "x", "1-0"},
		{"seven", "u", "3", "1-0"},
		{int64(7), "u", "3", "1-0"},
	} {
		client, _ := newFake(t, func(cmd goredis.Cmder) { cmd.(*goredis.Cmd).SetVal(reply) })
		if err := New(client, "r").Set(context.Background(), fencing.Token{Value: 7}, "w", nil); err == nil || !strings.Contains(err.Error(), "unexpected script reply") {
			t.Fatalf("reply %v: got %v, want an unexpected-reply error", reply, err)
		}
	}
}

func TestLoadReadsTheTokenHashAndFailsClosedWhenItIsMissing(t *testing.T) {
	tests := []struct {
		name        string
		fields      []any
		value       any // string or nil (missing value key)
		wantToken   fencing.Token
		wantValue   string
		wantVersion string
		wantErr     error
	}{
		{name: "initialised, never written", fields: []any{"0", nil, nil}, wantVersion: "0"},
		{name: "written", fields: []any{"7", "uid-a", "4"}, value: "hello", wantToken: fencing.Token{Value: 7, LeaseUID: "uid-a"}, wantValue: "hello", wantVersion: "4"},
		{name: "missing token key", fields: []any{nil, nil, nil}, wantErr: ErrStateMissing},
		{name: "token not a number", fields: []any{"x", nil, nil}, wantErr: ErrCorrupt},
		{name: "negative token", fields: []any{"-1", nil, nil}, wantErr: ErrCorrupt},
		{name: "version not a number", fields: []any{"1", nil, "v"}, wantErr: ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client, _ := newFake(t, func(cmd goredis.Cmder) {
				switch c := cmd.(type) {
				case *goredis.SliceCmd:
					c.SetVal(tt.fields)
				case *goredis.StringCmd:
					if s, ok := tt.value.(string); ok {
						c.SetVal(s)
					} else {
						c.SetErr(goredis.Nil)
					}
				}
			})
			tok, value, version, err := New(client, "billing").Load(context.Background())
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("got %v, want an error matching %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tok != tt.wantToken || string(value) != tt.wantValue || version != tt.wantVersion {
				t.Fatalf("got %+v %q %q, want %+v %q %q", tok, value, version, tt.wantToken, tt.wantValue, tt.wantVersion)
			}
		})
	}
}

func TestKeysForShareOneHashTag(t *testing.T) {
	k := KeysFor("billing")
	want := Keys{Token: "{billing}:token", Value: "{billing}:value", History: "{billing}:history"}
	if k != want {
		t.Fatalf("KeysFor = %+v, want %+v", k, want)
	}
	// A resource with braces still gives the three keys one hash tag: the
	// tag is the text up to the first "}", and the keys share that prefix.
	odd := KeysFor("a}b")
	for _, key := range []string{odd.Token, odd.Value, odd.History} {
		if !strings.HasPrefix(key, "{a}") {
			t.Fatalf("key %q: hash tag is not {a}", key)
		}
	}
}

func TestSetBoundsTheHistoryByDefault(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []Option
		want string
	}{
		{"default", nil, strconv.Itoa(DefaultHistoryLimit)},
		{"keep every entry", []Option{WithHistoryLimit(0)}, "0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			client, fake := newFake(t, func(cmd goredis.Cmder) {
				cmd.(*goredis.Cmd).SetVal([]any{"7", "", "1", "1-0"})
			})
			if err := New(client, "billing", tt.opts...).Set(context.Background(), fencing.Token{Value: 7}, "pod-a", nil); err != nil {
				t.Fatal(err)
			}
			cmds := fake.commands()
			if len(cmds) != 1 || fmt.Sprint(cmds[0][len(cmds[0])-1]) != tt.want {
				t.Fatalf("sent %v, want the history limit %s last", cmds, tt.want)
			}
		})
	}
}
