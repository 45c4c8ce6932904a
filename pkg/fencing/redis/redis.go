// Package redis is a fence in Redis: one Lua script (fence.lua, the
// ScriptSource variable) compares the caller's fencing token with the highest
// token Redis has accepted and, only if it is not stale (pkg/fencing's
// CheckToken rule, with Lease UIDs), raises the stored token, SETs the value
// and appends the write to a history stream, all in one atomic step inside
// Redis.
//
//	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
//	fence := redis.New(client, "billing") // keys {billing}:token, {billing}:value, {billing}:history
//	_, err := fence.Init(ctx)              // once, at setup (HSETNX {billing}:token token 0)
//	err = fence.Set(ctx, fencing.Token{Value: t.Token, LeaseUID: t.LeaseUID}, "pod-a", []byte("hello"))
//	// errors.Is(err, fencing.ErrStaleToken): a *fencing.StaleTokenError naming the stored token
//
// # Why this answers the Redlock debate
//
// A lock service (Redlock, or a Lease) cannot stop a client that was paused
// past its lock from writing: it wakes up believing it still holds the lock.
// Kleppmann's answer is a fencing token checked by the resource; Redlock has
// no monotonic token to offer. Here the election hands out a token that grows
// with every takeover (the Lease's leaseTransitions), and the check runs at
// the resource, in the same atomic step as the write: Redis runs a script
// without interleaving any other command, so no write with a lower token can
// slip in between the check and the SET, and no lock has to be trusted. Redis
// is not used as the lock; it is the resource, and it fences itself.
//
// # The script, from any language
//
// fence.lua is the contract: any client can load the same text with EVAL or
// SCRIPT LOAD + EVALSHA (Set uses EVALSHA and falls back to EVAL when Redis
// does not know the script, as after a restart):
//
//	EVAL <fence.lua> 3 {billing}:token {billing}:value {billing}:history <token> <leaseUID> <writer> <value> [<version> [<history limit>]]
//
// It replies {token, uid, version, history entry ID} as recorded, or an error
// reply whose first word says why: "STALE token=5 stored=7 uid=<stored lease
// UID>", "CONFLICT version=.. expected=..", "MISSING ...", "INVALID ...",
// "CORRUPT ...". The header of fence.lua documents every key and argument.
// The history stream is bounded: the script trims it to about 10000 entries
// (DefaultHistoryLimit) unless <history limit> says otherwise ("0" keeps
// every entry).
// In Redis Cluster the three keys must hash to one slot: New gives them one
// hash tag ({resource}); with NewWithKeys, give them one yourself.
//
// # Fails closed
//
// The token key must exist: create it once, where the fence is set up
// (Init, or HSETNX <token key> token 0). A missing token key is an error
// (ErrStateMissing), never "highest token 0": if Redis lost its data, the
// fence refuses every write instead of accepting a stale leader's.
//
// # What it assumes of Redis
//
// The fence is only as durable as the highest token. A Redis restarted
// without persistence has forgotten it (the fence then fails closed until
// someone runs Init, knowingly starting again at 0). Configure:
//
//   - appendonly yes, with appendfsync always to survive a machine crash
//     (everysec, the default, can lose the last second of accepted tokens
//     when the machine, not just Redis, dies; a lost accepted token lets a
//     stale leader's next write in);
//   - maxmemory-policy noeviction (or a volatile-* policy; the fence's keys
//     have no TTL), so the token key is never evicted;
//   - no asynchronous replica failover without care: a replica promoted
//     before it received the last write has the older token. Use WAIT after
//     Set, or keep the fence on a primary whose failover waits for the
//     replicas (Sentinel/Cluster with min-replicas-to-write), if that matters;
//   - Redis 5 or later (streams; scripts replicate their effects).
//
// # Store
//
// Fence is also a fencing.Store (Load, Commit): Commit passes the loaded
// version to the same script, which refuses with ErrConflict when the
// version moved, so fencing.Fence, httpstore.NewServer and the demo can use
// Redis as their store. Set does the same in one round trip.
package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	goredis "github.com/redis/go-redis/v9"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
)

// ScriptSource is fence.lua, the fence as a Redis Lua script; load it with
// EVAL or SCRIPT LOAD from any language.
//
//go:embed fence.lua
var ScriptSource string

var script = goredis.NewScript(ScriptSource)

// Hash fields of the token key.
const (
	FieldToken   = "token"
	FieldUID     = "uid"
	FieldVersion = "version"
)

// Errors matched with errors.Is.
var (
	// ErrStateMissing: the token key does not exist. Either the fence was
	// never set up (Init) or Redis lost it, and the highest token with it;
	// nothing is written.
	ErrStateMissing = errors.New("redis fence state missing")
	// ErrInvalid: bad input (a negative token, a bad version, empty or equal
	// keys, a key of the wrong type), found before or by the script.
	ErrInvalid = errors.New("invalid redis fence input")
	// ErrCorrupt: the token key exists but does not hold a valid token.
	ErrCorrupt = errors.New("redis fence state corrupt")
)

// Keys are the three keys of one fence.
type Keys struct {
	// Token is a hash: token, uid, version (see the Field constants).
	Token string
	// Value is a string, the fenced value.
	Value string
	// History is a stream with one entry per accepted write.
	History string
}

// KeysFor returns the keys New uses for resource: {resource}:token,
// {resource}:value and {resource}:history (one hash tag, so one Redis Cluster
// slot).
func KeysFor(resource string) Keys {
	tag := "{" + resource + "}"
	return Keys{Token: tag + ":token", Value: tag + ":value", History: tag + ":history"}
}

func (k Keys) validate() error {
	switch {
	case k.Token == "" || k.Value == "" || k.History == "":
		return fmt.Errorf("%w: empty key in %+v", ErrInvalid, k)
	case k.Token == k.Value || k.Token == k.History || k.Value == k.History:
		return fmt.Errorf("%w: the token, value and history keys must differ, got %+v", ErrInvalid, k)
	}
	return nil
}

func (k Keys) list() []string { return []string{k.Token, k.Value, k.History} }

// Fence is a fenced value in Redis. It is safe for concurrent use.
type Fence struct {
	client       goredis.Cmdable
	keys         Keys
	writer       string
	historyLimit int64
	err          error // bad construction, returned by every call
}

var _ fencing.Store = (*Fence)(nil)

// Option configures a Fence.
type Option func(*Fence)

// WithWriter sets the writer recorded in the history by Commit (Set takes it
// as an argument).
func WithWriter(name string) Option { return func(f *Fence) { f.writer = name } }

// DefaultHistoryLimit is the history stream's length, about (XADD MAXLEN ~),
// when neither WithHistoryLimit nor the script's ARGV[6] says otherwise: a
// history kept whole grows until a Redis with maxmemory-policy noeviction
// refuses every write, the fence's included.
const DefaultHistoryLimit = 10000

// WithHistoryLimit trims the history stream to about n entries (XADD MAXLEN ~
// n; a few more may stay) instead of DefaultHistoryLimit; 0 keeps every
// entry (the stream then grows without bound: trim it yourself, XTRIM).
func WithHistoryLimit(n int64) Option { return func(f *Fence) { f.historyLimit = n } }

// New returns the fence of resource, on the keys KeysFor(resource). It makes
// no call to Redis; an empty resource or a nil client is reported by every
// method, before any call.
func New(client goredis.Cmdable, resource string, opts ...Option) *Fence {
	f := NewWithKeys(client, KeysFor(resource), opts...)
	if resource == "" && f.err == nil {
		f.err = fmt.Errorf("%w: empty resource name", ErrInvalid)
	}
	return f
}

// NewWithKeys returns a fence on explicit keys (in Redis Cluster, give them
// one hash tag).
func NewWithKeys(client goredis.Cmdable, keys Keys, opts ...Option) *Fence {
	f := &Fence{client: client, keys: keys, historyLimit: DefaultHistoryLimit}
	for _, o := range opts {
		o(f)
	}
	switch {
	case client == nil:
		f.err = fmt.Errorf("%w: nil redis client", ErrInvalid)
	case f.historyLimit < 0:
		f.err = fmt.Errorf("%w: history limit %d is negative", ErrInvalid, f.historyLimit)
	default:
		f.err = keys.validate()
	}
	return f
}

// Keys returns the fence's keys.
func (f *Fence) Keys() Keys { return f.keys }

// Init creates the token key with highest token 0 if it does not exist, and
// reports whether it did; an existing fence is left as it is. Call it once,
// where the fence is set up, never on the write path: after Redis lost the
// fence's state, Init starts it again at 0 and every token it rejected
// before would be accepted.
func (f *Fence) Init(ctx context.Context) (created bool, err error) {
	if f.err != nil {
		return false, f.err
	}
	created, err = f.client.HSetNX(ctx, f.keys.Token, FieldToken, "0").Result()
	if err != nil {
		return false, fmt.Errorf("redis fence %s: init: %w", f.keys.Token, err)
	}
	return created, nil
}

// Set writes value if tok is not stale, in one atomic script: a stale token
// returns a *fencing.StaleTokenError (errors.Is(err, fencing.ErrStaleToken))
// naming the stored token, and nothing is written. holder is recorded in the
// history stream.
func (f *Fence) Set(ctx context.Context, tok fencing.Token, holder string, value []byte) error {
	_, err := f.run(ctx, tok, holder, value, "")
	return err
}

// Result is what an accepted write recorded.
type Result struct {
	// Token is the highest token now stored (tok, with the stored Lease UID
	// kept if tok had none and the same value).
	Token fencing.Token
	// Version counts accepted writes.
	Version int64
	// HistoryID is the write's entry in the history stream.
	HistoryID string
}

// SetResult is Set, returning what was recorded.
func (f *Fence) SetResult(ctx context.Context, tok fencing.Token, holder string, value []byte) (Result, error) {
	return f.run(ctx, tok, holder, value, "")
}

// Load implements fencing.Store: the highest token with its Lease UID, the
// value and the version, read in one MULTI/EXEC. A missing token key is an
// error matching ErrStateMissing.
func (f *Fence) Load(ctx context.Context) (fencing.Token, []byte, string, error) {
	if f.err != nil {
		return fencing.Token{}, nil, "", f.err
	}
	var hm *goredis.SliceCmd
	var get *goredis.StringCmd
	_, err := f.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		hm = p.HMGet(ctx, f.keys.Token, FieldToken, FieldUID, FieldVersion)
		get = p.Get(ctx, f.keys.Value)
		return nil
	})
	if err != nil && !errors.Is(err, goredis.Nil) {
		return fencing.Token{}, nil, "", fmt.Errorf("redis fence %s: load: %w", f.keys.Token, err)
	}
	fields, err := hm.Result()
	if err != nil {
		return fencing.Token{}, nil, "", fmt.Errorf("redis fence %s: load: %w", f.keys.Token, err)
	}
	tok, version, err := f.parseState(fields)
	if err != nil {
		return fencing.Token{}, nil, "", err
	}
	value, err := get.Bytes()
	if errors.Is(err, goredis.Nil) {
		value, err = nil, nil
	}
	if err != nil {
		return fencing.Token{}, nil, "", fmt.Errorf("redis fence %s: load: %w", f.keys.Value, err)
	}
	return tok, value, version, nil
}

func (f *Fence) parseState(fields []any) (fencing.Token, string, error) {
	str := func(v any) (string, bool) { s, ok := v.(string); return s, ok }
	raw, ok := str(fields[0])
	if !ok {
		return fencing.Token{}, "", fmt.Errorf("redis fence %s: %w (create it once, at setup, with Init; "+
			"if it existed, Redis lost it and the highest token with it)", f.keys.Token, ErrStateMissing)
	}
	value, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || value < 0 {
		return fencing.Token{}, "", fmt.Errorf("redis fence %s: %w: token %q is not a non-negative integer", f.keys.Token, ErrCorrupt, raw)
	}
	uid, _ := str(fields[1])
	version := "0"
	if v, ok := str(fields[2]); ok {
		if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 0 {
			return fencing.Token{}, "", fmt.Errorf("redis fence %s: %w: version %q is not a non-negative integer", f.keys.Token, ErrCorrupt, v)
		}
		version = v
	}
	return fencing.Token{Value: value, LeaseUID: uid}, version, nil
}

// Commit implements fencing.Store: the script writes tok and value if the
// token key is still at version (from Load), else returns an error matching
// fencing.ErrConflict; it applies the fencing rule too, so a Commit never
// records a lower token or drops the stored Lease UID. The writer is
// WithWriter's.
func (f *Fence) Commit(ctx context.Context, version string, tok fencing.Token, value []byte) error {
	if f.err != nil {
		return f.err
	}
	if n, err := strconv.ParseInt(version, 10, 64); err != nil || n < 0 {
		return fmt.Errorf("redis fence %s: %w: version %q is not a non-negative integer (a version from Load)", f.keys.Token, ErrInvalid, version)
	}
	_, err := f.run(ctx, tok, f.writer, value, version)
	return err
}

// ValidateToken is the Go-side check of a token before any call: not
// negative, and a Lease UID without control characters (the script's error
// replies carry it on one line).
func ValidateToken(tok fencing.Token) error {
	if tok.Value < 0 {
		return fmt.Errorf("%w: fencing token %d is negative", ErrInvalid, tok.Value)
	}
	if i := strings.IndexFunc(tok.LeaseUID, unicode.IsControl); i >= 0 {
		return fmt.Errorf("%w: lease UID %q contains a control character", ErrInvalid, tok.LeaseUID)
	}
	return nil
}

func (f *Fence) run(ctx context.Context, tok fencing.Token, writer string, value []byte, version string) (Result, error) {
	if f.err != nil {
		return Result{}, f.err
	}
	if err := ValidateToken(tok); err != nil {
		return Result{}, err
	}
	args := []any{strconv.FormatInt(tok.Value, 10), tok.LeaseUID, writer, value, version, strconv.FormatInt(f.historyLimit, 10)}
	reply, err := script.Run(ctx, f.client, f.keys.list(), args...).Slice()
	if err != nil {
		return Result{}, ParseError(err, tok)
	}
	res, err := parseResult(reply)
	if err != nil {
		return Result{}, fmt.Errorf("redis fence %s: %w", f.keys.Token, err)
	}
	return res, nil
}

func parseResult(reply []any) (Result, error) {
	if len(reply) != 4 {
		return Result{}, fmt.Errorf("unexpected script reply %v: want 4 elements", reply)
	}
	s := make([]string, 4)
	for i, v := range reply {
		str, ok := v.(string)
		if !ok {
			return Result{}, fmt.Errorf("unexpected script reply %v: element %d is %T, not a string", reply, i+1, v)
		}
		s[i] = str
	}
	token, err1 := strconv.ParseInt(s[0], 10, 64)
	version, err2 := strconv.ParseInt(s[2], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return Result{}, fmt.Errorf("unexpected script reply %v: %w", reply, err)
	}
	return Result{Token: fencing.Token{Value: token, LeaseUID: s[1]}, Version: version, HistoryID: s[3]}, nil
}

// ParseError maps an error of the fence script to Go: STALE to a
// *fencing.StaleTokenError for tok (errors.Is(err, fencing.ErrStaleToken)),
// CONFLICT to an error matching fencing.ErrConflict, MISSING to
// ErrStateMissing, INVALID to ErrInvalid, CORRUPT to ErrCorrupt. Other errors
// (network, a Redis without the script's commands) are wrapped as they are.
// Clients that run the script themselves (a pipeline, another client
// library's EVAL) can use it on the error they got.
func ParseError(err error, tok fencing.Token) error {
	if err == nil {
		return nil
	}
	var rerr goredis.Error
	if !errors.As(err, &rerr) {
		return fmt.Errorf("redis fence: %w", err)
	}
	msg := rerr.Error()
	code, rest, _ := strings.Cut(msg, " ")
	switch code {
	case "STALE":
		stored, uid, ok := parseStale(rest)
		if !ok {
			return fmt.Errorf("redis fence: malformed STALE reply %q", msg)
		}
		return &fencing.StaleTokenError{Token: tok.Value, Highest: stored, LeaseUID: tok.LeaseUID, HighestLeaseUID: uid}
	case "CONFLICT":
		return fmt.Errorf("redis fence: %s: %w", rest, fencing.ErrConflict)
	case "MISSING":
		return fmt.Errorf("redis fence: %s: %w", rest, ErrStateMissing)
	case "INVALID":
		return fmt.Errorf("redis fence: %s: %w", rest, ErrInvalid)
	case "CORRUPT":
		return fmt.Errorf("redis fence: %s: %w", rest, ErrCorrupt)
	}
	return fmt.Errorf("redis fence: %w", err)
}

// parseStale parses "token=<t> stored=<s> uid=<uid to the end>".
func parseStale(rest string) (stored int64, uid string, ok bool) {
	fields := strings.SplitN(rest, " ", 3)
	if len(fields) != 3 || !strings.HasPrefix(fields[0], "token=") || !strings.HasPrefix(fields[1], "stored=") || !strings.HasPrefix(fields[2], "uid=") {
		return 0, "", false
	}
	stored, err := strconv.ParseInt(strings.TrimPrefix(fields[1], "stored="), 10, 64)
	if err != nil || stored < 0 {
		return 0, "", false
	}
	return stored, strings.TrimPrefix(fields[2], "uid="), true
}
