// Package postgres is the fence inside PostgreSQL: a SQL function,
// fence(resource, token, lease_uid, holder), that checks a fencing token
// against the highest one the database has accepted for a resource and
// raises it, in the caller's own transaction. Whatever else that transaction
// writes commits only if the token was not stale; a stale token aborts it.
//
//	pool, _ := pgxpool.New(ctx, url)
//	_ = postgres.Migrate(ctx, pool) // once, at setup: tables and fence()
//	fence := postgres.New(pool)
//	err := fence.Do(ctx, "orders", fencing.Token{Value: t.Token, LeaseUID: t.LeaseUID}, "pod-a", func(tx pgx.Tx) error {
//		_, err := tx.Exec(ctx, "UPDATE orders SET state = 'billed' WHERE id = $1", id)
//		return err
//	})
//	// errors.Is(err, fencing.ErrStaleToken): a *fencing.StaleTokenError naming the stored token; nothing committed
//
// # The schema (Migration, migration.sql)
//
//   - elector_fence (resource text primary key, token bigint not null check
//     (token >= 0), lease_uid text, holder text, value bytea, version bigint,
//     updated_at timestamptz): one row per resource, the highest accepted
//     token with its Lease UID. value and version serve Store.
//   - elector_fence_history (id bigserial, resource, token, lease_uid,
//     holder, committed_at): one row per accepted check, inserted by fence()
//     in the same transaction, so it holds exactly the checks that
//     committed. For one resource, id order is commit order (the row lock,
//     below), so a soak can verify from the database's own record that
//     accepted tokens never went down: SELECT token FROM
//     elector_fence_history WHERE resource = $1 ORDER BY id.
//   - fence(resource text, token bigint, lease_uid text DEFAULT NULL, holder
//     text DEFAULT NULL) RETURNS bigint: the check, pkg/fencing's CheckToken
//     rule exactly (lower: stale; equal with both UIDs known and different:
//     stale; an empty or NULL UID falls back to the value only; an equal
//     token without a UID never erases the stored UID). It returns the
//     accepted token.
//
// # From any language
//
// Call it in your transaction, before (or after) your writes:
//
//	BEGIN;
//	SELECT fence('orders', 7, '4f0c9b52', 'pod-a');
//	UPDATE orders SET state = 'billed' WHERE id = 42;
//	COMMIT;
//
// A stale token raises SQLSTATE EF001 (class EF, "elector fence"); its
// message names the stored token and its DETAIL reads
// "token=6 stored=7 stored_lease_uid=4f0c9b52". Bad input (a NULL or empty
// resource, a NULL or negative token) raises SQLSTATE 22023
// (invalid_parameter_value). Either aborts the transaction: roll back.
//
// # Why it holds, and under which isolation levels
//
// fence() is one INSERT ... ON CONFLICT (resource) DO UPDATE ... WHERE
// stored <= new. That statement takes the resource's row lock, also when its
// WHERE fails, and keeps it until the transaction ends. A second writer's
// fence() on the same resource waits for that lock; when the first commits,
// READ COMMITTED re-evaluates the WHERE against the committed row, so the
// second check runs against the token the first wrote: a stale writer
// blocked behind a newer one is rejected. If the first rolls back, the
// second checks against the row as it was.
//
// Under READ COMMITTED (the default, and READ UNCOMMITTED, which PostgreSQL
// runs as READ COMMITTED) this needs no retry. Under REPEATABLE READ and
// SERIALIZABLE the waiting writer cannot re-read a row changed after its
// snapshot: PostgreSQL aborts it with a serialization failure (SQLSTATE
// 40001) instead, and SERIALIZABLE can also abort a transaction for what the
// caller's function read and wrote. Both keep the fence sound (nothing of
// the failed transaction commits). Do retries a transaction that failed with
// 40001 or a deadlock (40P01) in a new transaction, up to WithMaxAttempts
// times (default 5); the token is checked again each time, so a retry that
// now finds a newer token gets the StaleTokenError. Your function must
// therefore have no effect outside tx. WithMaxAttempts(1) returns the
// failure instead (errors.As(err, **pgconn.PgError), IsSerializationFailure).
//
// # Store
//
// Store (Fence.Store) is a fencing.Store on one resource's row: Load reads
// token, Lease UID, value and version; Commit calls fence() and writes the
// value in one transaction, and rolls back with fencing.ErrConflict if
// another commit came between Load and Commit. So fencing.Fence,
// httpstore.NewServer and the chaos soak can keep their fenced value in
// PostgreSQL, with the history above.
package postgres

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
)

// Migration creates the fence's tables and the fence() function; it is
// idempotent (IF NOT EXISTS, CREATE OR REPLACE). Run it with Migrate, or as
// one of your own migrations.
//
//go:embed migration.sql
var Migration string

// SQLSTATEs raised by fence().
const (
	// CodeStaleToken: the token is stale (class EF, "elector fence").
	CodeStaleToken = "EF001"
	// CodeInvalidInput: a NULL or empty resource, a NULL or negative token
	// (PostgreSQL's invalid_parameter_value).
	CodeInvalidInput = "22023"
)

// ErrInvalid matches bad input, found in Go before any SQL or by fence().
var ErrInvalid = errors.New("invalid postgres fence input")

// DB is what the fence runs on: a *pgxpool.Pool or a *pgx.Conn.
type DB interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Migrate runs Migration in one transaction, under an advisory lock so that
// concurrent callers (every replica at start-up) do not race.
func Migrate(ctx context.Context, db DB) error {
	if db == nil {
		return fmt.Errorf("%w: nil database", ErrInvalid)
	}
	return pgx.BeginTxFunc(ctx, db, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('elector_fence migration'))"); err != nil {
			return fmt.Errorf("postgres fence: migrate: %w", err)
		}
		if _, err := tx.Exec(ctx, Migration); err != nil {
			return fmt.Errorf("postgres fence: migrate: %w", err)
		}
		return nil
	})
}

// DefaultMaxAttempts bounds how often Do runs a transaction that failed with
// a serialization failure or a deadlock.
const DefaultMaxAttempts = 5

// Fence runs fenced transactions on a database. It is safe for concurrent
// use.
type Fence struct {
	db          DB
	iso         pgx.TxIsoLevel
	maxAttempts int
	err         error // bad construction, returned by every call
}

// Option configures a Fence.
type Option func(*Fence)

// WithIsolation sets the isolation level of Do's transactions (default
// pgx.ReadCommitted; pgx.RepeatableRead and pgx.Serializable are supported,
// see the package doc).
func WithIsolation(level pgx.TxIsoLevel) Option { return func(f *Fence) { f.iso = level } }

// WithMaxAttempts sets how often Do runs a transaction that failed with a
// serialization failure (40001) or a deadlock (40P01); 1 never retries.
func WithMaxAttempts(n int) Option { return func(f *Fence) { f.maxAttempts = n } }

// New returns a fence on db. It makes no call to the database; bad options
// are reported by every method.
func New(db DB, opts ...Option) *Fence {
	f := &Fence{db: db, iso: pgx.ReadCommitted, maxAttempts: DefaultMaxAttempts}
	for _, o := range opts {
		o(f)
	}
	switch {
	case db == nil:
		f.err = fmt.Errorf("%w: nil database", ErrInvalid)
	case f.maxAttempts < 1:
		f.err = fmt.Errorf("%w: max attempts %d: must be at least 1", ErrInvalid, f.maxAttempts)
	default:
		switch f.iso {
		case pgx.ReadCommitted, pgx.ReadUncommitted, pgx.RepeatableRead, pgx.Serializable:
		case "":
			f.iso = pgx.ReadCommitted
		default:
			f.err = fmt.Errorf("%w: unknown isolation level %q", ErrInvalid, f.iso)
		}
	}
	return f
}

// Validate is the Go-side check of a fence call before any SQL: a non-empty
// resource name of valid UTF-8 without NUL bytes, a non-negative token, and a
// Lease UID and holder that PostgreSQL can store as text.
func Validate(resource string, tok fencing.Token, holder string) error {
	if resource == "" {
		return fmt.Errorf("%w: empty resource name", ErrInvalid)
	}
	if tok.Value < 0 {
		return fmt.Errorf("%w: fencing token %d for resource %q is negative", ErrInvalid, tok.Value, resource)
	}
	for name, s := range map[string]string{"resource name": resource, "lease UID": tok.LeaseUID, "holder": holder} {
		if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
			return fmt.Errorf("%w: %s %q is not text PostgreSQL can store (invalid UTF-8 or a NUL byte)", ErrInvalid, name, s)
		}
	}
	return nil
}

// Check runs fence() in tx, a transaction of yours: nil if tok is accepted
// (the row lock is then held until tx ends), a *fencing.StaleTokenError if it
// is stale, an error matching ErrInvalid for bad input. After an error, tx is
// aborted: roll it back.
func Check(ctx context.Context, tx pgx.Tx, resource string, tok fencing.Token, holder string) error {
	if err := Validate(resource, tok, holder); err != nil {
		return err
	}
	var accepted int64
	err := tx.QueryRow(ctx, "SELECT fence($1, $2, $3, $4)", resource, tok.Value, tok.LeaseUID, holder).Scan(&accepted)
	if err != nil {
		return ParseError(err, tok)
	}
	return nil
}

// Do runs fn in a transaction that first checks tok for resource (fence()),
// then commits what fn wrote. A stale token returns a *fencing.StaleTokenError
// (errors.Is(err, fencing.ErrStaleToken)) naming the stored token, and fn is
// not called; if fn returns an error, or the commit fails, nothing of the
// transaction is committed, the token check included. holder is recorded in
// the history ("" for none).
//
// fn may run more than once: Do retries serialization failures and
// deadlocks (see the package doc and WithMaxAttempts), so fn must have no
// effect outside tx.
func (f *Fence) Do(ctx context.Context, resource string, tok fencing.Token, holder string, fn func(tx pgx.Tx) error) error {
	if f.err != nil {
		return f.err
	}
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalid)
	}
	if err := Validate(resource, tok, holder); err != nil {
		return err
	}
	return f.retry(ctx, func() error {
		return pgx.BeginTxFunc(ctx, f.db, pgx.TxOptions{IsoLevel: f.iso}, func(tx pgx.Tx) error {
			if err := Check(ctx, tx, resource, tok, holder); err != nil {
				return err
			}
			return fn(tx)
		})
	})
}

// retry runs attempt until it does not fail with a serialization failure or
// a deadlock, at most maxAttempts times.
func (f *Fence) retry(ctx context.Context, attempt func() error) error {
	var err error
	for i := 1; i <= f.maxAttempts; i++ {
		if err = attempt(); err == nil || !IsSerializationFailure(err) {
			return err
		}
		if i == f.maxAttempts || ctx.Err() != nil {
			break
		}
		// A short, growing pause lets the transaction we collided with end.
		t := time.NewTimer(time.Duration(i) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("postgres fence: %w (after %v)", ctx.Err(), err)
		case <-t.C:
		}
	}
	if f.maxAttempts > 1 {
		return fmt.Errorf("postgres fence: gave up after %d attempts: %w", f.maxAttempts, err)
	}
	return err
}

// IsSerializationFailure reports whether err is a serialization failure
// (40001) or a deadlock (40P01): the transaction can be run again.
func IsSerializationFailure(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

// ParseError maps an error of fence() to Go: EF001 to a
// *fencing.StaleTokenError for tok (Highest and HighestLeaseUID from the
// error's DETAIL), 22023 to an error matching ErrInvalid. Other errors are
// returned as they are. Use it on errors of your own SELECT fence(...).
func ParseError(err error, tok fencing.Token) error {
	var pgErr *pgconn.PgError
	if err == nil || !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case CodeStaleToken:
		stored, uid, ok := parseStaleDetail(pgErr.Detail)
		if !ok {
			return fmt.Errorf("postgres fence: malformed stale-token detail %q: %w", pgErr.Detail, err)
		}
		return &fencing.StaleTokenError{Token: tok.Value, Highest: stored, LeaseUID: tok.LeaseUID, HighestLeaseUID: uid}
	case CodeInvalidInput:
		return fmt.Errorf("%w: %s", ErrInvalid, pgErr.Message)
	}
	return err
}

// parseStaleDetail parses "token=<t> stored=<s> stored_lease_uid=<uid to the end>".
func parseStaleDetail(detail string) (stored int64, uid string, ok bool) {
	fields := strings.SplitN(detail, " ", 3)
	if len(fields) != 3 || !strings.HasPrefix(fields[0], "token=") || !strings.HasPrefix(fields[1], "stored=") ||
		!strings.HasPrefix(fields[2], "stored_lease_uid=") {
		return 0, "", false
	}
	stored, err := strconv.ParseInt(strings.TrimPrefix(fields[1], "stored="), 10, 64)
	if err != nil || stored < 0 {
		return 0, "", false
	}
	return stored, strings.TrimPrefix(fields[2], "stored_lease_uid="), true
}

// Stored returns the highest token accepted for resource, with its Lease UID
// (token 0 if resource was never fenced).
func (f *Fence) Stored(ctx context.Context, resource string) (fencing.Token, error) {
	tok, _, _, err := f.Store(resource, "").Load(ctx)
	return tok, err
}

// Entry is one accepted check in elector_fence_history.
type Entry struct {
	// ID orders the entries of one resource by commit.
	ID          int64
	Token       fencing.Token
	Holder      string
	CommittedAt time.Time
}

// History returns resource's rows of elector_fence_history, oldest first.
func (f *Fence) History(ctx context.Context, resource string) ([]Entry, error) {
	if f.err != nil {
		return nil, f.err
	}
	var out []Entry
	err := pgx.BeginTxFunc(ctx, f.db, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id, token, coalesce(lease_uid, ''), coalesce(holder, ''), committed_at
			FROM elector_fence_history WHERE resource = $1 ORDER BY id`, resource)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) {
			var e Entry
			err := r.Scan(&e.ID, &e.Token.Value, &e.Token.LeaseUID, &e.Holder, &e.CommittedAt)
			return e, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres fence: history of %q: %w", resource, err)
	}
	return out, nil
}

// Store is a fencing.Store on one resource's row of elector_fence: its value
// column holds the fenced value, its version column the version.
type Store struct {
	f        *Fence
	resource string
	holder   string
}

var _ fencing.Store = (*Store)(nil)

// Store returns the fencing.Store of resource; holder is recorded in the
// history of every Commit.
func (f *Fence) Store(resource, holder string) *Store {
	return &Store{f: f, resource: resource, holder: holder}
}

func (s *Store) validate() error {
	if s.f.err != nil {
		return s.f.err
	}
	return Validate(s.resource, fencing.Token{}, s.holder)
}

// Load implements fencing.Store. A resource never fenced loads as token 0,
// no value, version "0".
func (s *Store) Load(ctx context.Context) (fencing.Token, []byte, string, error) {
	if err := s.validate(); err != nil {
		return fencing.Token{}, nil, "", err
	}
	var tok fencing.Token
	var value []byte
	var version int64
	err := pgx.BeginTxFunc(ctx, s.f.db, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT token, coalesce(lease_uid, ''), value, version FROM elector_fence WHERE resource = $1",
			s.resource).Scan(&tok.Value, &tok.LeaseUID, &value, &version)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return fencing.Token{}, nil, "0", nil
	}
	if err != nil {
		return fencing.Token{}, nil, "", fmt.Errorf("postgres fence: load %q: %w", s.resource, err)
	}
	return tok, value, strconv.FormatInt(version, 10), nil
}

// Commit implements fencing.Store: in one transaction, fence() checks and
// records tok (with a history row) and the value is written; if the resource
// is no longer at version, the transaction rolls back and Commit returns an
// error matching fencing.ErrConflict. A stale token is a
// *fencing.StaleTokenError.
func (s *Store) Commit(ctx context.Context, version string, tok fencing.Token, value []byte) error {
	if err := s.validate(); err != nil {
		return err
	}
	if err := Validate(s.resource, tok, s.holder); err != nil {
		return err
	}
	want, err := strconv.ParseInt(version, 10, 64)
	if err != nil || want < 0 {
		return fmt.Errorf("%w: version %q is not a non-negative integer (a version from Load)", ErrInvalid, version)
	}
	return s.f.retry(ctx, func() error {
		return pgx.BeginTxFunc(ctx, s.f.db, pgx.TxOptions{IsoLevel: s.f.iso}, func(tx pgx.Tx) error {
			if err := Check(ctx, tx, s.resource, tok, s.holder); err != nil {
				return err
			}
			var got int64
			if err := tx.QueryRow(ctx, "UPDATE elector_fence SET value = $2 WHERE resource = $1 RETURNING version",
				s.resource, value).Scan(&got); err != nil {
				return fmt.Errorf("postgres fence: commit %q: %w", s.resource, err)
			}
			if got != want+1 {
				return fmt.Errorf("postgres fence: %q is at version %d, not %d: %w", s.resource, got-1, want, fencing.ErrConflict)
			}
			return nil
		})
	})
}
