// Package postgres is the fence inside PostgreSQL: a SQL function,
// elector_fence(resource, token, lease_uid, holder), that checks a fencing
// token against the highest one the database has accepted for a resource
// (raising it when the token is higher), in the caller's own transaction.
// Whatever else that transaction writes commits only if the token was not
// stale; a stale token aborts it.
//
//	pool, _ := pgxpool.New(ctx, url)
//	_ = postgres.Migrate(ctx, pool) // once, at setup: tables and elector_fence()
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
//     token with its Lease UID and the holder that raised it. value and
//     version serve Store.
//   - elector_fence_history (id bigserial, resource, token, lease_uid,
//     holder, committed_at): one row per accepted check, inserted by
//     elector_fence() in the same transaction, so it holds only checks that
//     committed. For one resource, tokens never go down in id order, and the
//     row that raised the token comes after every row of a lower token (the
//     locks, below), so a soak can verify from the database's own record
//     that accepted tokens never went down: SELECT token FROM
//     elector_fence_history WHERE resource = $1 ORDER BY id.
//   - elector_fence_settings (history boolean default true, history_keep
//     bigint default 10000): the history is bounded by default. One check in
//     1024 (by history id; one pruner per resource at a time) deletes the
//     resource's rows older than its newest history_keep, so a resource
//     keeps about history_keep to history_keep + 1023 rows (history_keep 0
//     keeps every row; history false writes none). Change them with UPDATE
//     elector_fence_settings SET history_keep = 100000; a migration run
//     again keeps them.
//   - elector_fence(resource text, token bigint, lease_uid text DEFAULT
//     NULL, holder text DEFAULT NULL) RETURNS bigint: the check,
//     pkg/fencing's CheckToken rule exactly (lower: stale; equal with both
//     UIDs known and different: stale; an empty or NULL UID falls back to
//     the value only; an equal token without a UID never erases the stored
//     UID). It returns the accepted token.
//
// Before this version the function was called fence(), a name anyone's
// schema may use. Migrate does not create fence() any more; a fence() it
// created before becomes a deprecated wrapper of elector_fence() (any other
// fence() is left alone). Move callers to elector_fence(), then DROP
// FUNCTION fence(text, bigint, text, text).
//
// # From any language
//
// Call it in your transaction, before (or after) your writes:
//
//	BEGIN;
//	SELECT elector_fence('orders', 7, '4f0c9b52', 'pod-a');
//	UPDATE orders SET state = 'billed' WHERE id = 42;
//	COMMIT;
//
// A stale token raises SQLSTATE EF001 (class EF, "elector fence"); its
// message names the stored token and its DETAIL reads
// "token=6 stored=7 stored_lease_uid=4f0c9b52". Bad input (a NULL or empty
// resource, a NULL or negative token) raises SQLSTATE 22023
// (invalid_parameter_value). Either aborts the transaction: roll back. A
// driver that pipelines (pgx batches, libpq pipeline mode, psycopg's
// pipeline) can send the SELECT with the transaction's first statement in
// one round trip: the server still runs them in order, and an error in the
// check aborts everything after it.
//
// # Why it holds, and under which isolation levels
//
// elector_fence() takes a transactional advisory lock per resource, held
// until the caller's transaction ends. A check of the token already stored
// takes it shared: a leader's concurrent writers run in parallel and write
// nothing to elector_fence. A check that writes elector_fence (a higher
// token, the first check of a resource, a Lease UID to record) takes it
// exclusive: it waits until every open transaction that checked the old
// token has ended, and PostgreSQL queues any check that comes after it
// behind it, so those then read the raised token and are rejected. It reads
// the stored token only once it holds the lock; under READ COMMITTED (the
// default, and READ UNCOMMITTED, which PostgreSQL runs as READ COMMITTED)
// that read sees the last commit, so it needs no retry. A check found stale
// without the lock is stale for ever (tokens only go up).
//
// Under REPEATABLE READ and SERIALIZABLE the transaction's snapshot may be
// older than the lock: a resource row changed after it is a serialization
// failure (SQLSTATE 40001), and SERIALIZABLE can also abort a transaction
// for what the caller's function read and wrote. Both keep the fence sound
// (nothing of the failed transaction commits). Do retries a transaction
// that failed with 40001 or a deadlock (40P01) in a new transaction, up to
// WithMaxAttempts times (default 5); the token is checked again each time,
// so a retry that now finds a newer token gets the StaleTokenError. Your
// function must therefore have no effect outside tx. WithMaxAttempts(1)
// returns the failure instead (errors.As(err, **pgconn.PgError),
// IsSerializationFailure).
//
// The advisory locks' keys are (1162626371, hashtext(resource)) and, for
// pruning, (1162626372, hashtext(resource)): two resources whose names hash
// alike share a lock (they wait for each other, nothing more), and your own
// two-key advisory locks should not use those first keys.
//
// # Store
//
// Store (Fence.Store) is a fencing.Store on one resource's row: Load reads
// token, Lease UID, value and version; Commit runs elector_fence() and
// writes the value (version + 1) in one transaction, and rolls back with
// fencing.ErrConflict if another commit came between Load and Commit. So
// fencing.Fence, httpstore.NewServer and the chaos soak can keep their
// fenced value in PostgreSQL, with the history above.
package postgres

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
)

// Migration creates the fence's tables, its settings row and the
// elector_fence() function; it is idempotent (IF NOT EXISTS, CREATE OR
// REPLACE, settings kept). Run it with Migrate, or as one of your own
// migrations.
//
//go:embed migration.sql
var Migration string

// SQLSTATEs raised by elector_fence().
const (
	// CodeStaleToken: the token is stale (class EF, "elector fence").
	CodeStaleToken = "EF001"
	// CodeInvalidInput: a NULL or empty resource, a NULL or negative token
	// (PostgreSQL's invalid_parameter_value).
	CodeInvalidInput = "22023"
)

// ErrInvalid matches bad input, found in Go before any SQL or by elector_fence().
var ErrInvalid = errors.New("invalid postgres fence input")

// DB is what the fence runs on: a *pgxpool.Pool or a *pgx.Conn (on which
// Do sends the BEGIN with the check), or anything else that begins pgx
// transactions.
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

// DefaultHistoryKeep is elector_fence_settings.history_keep after the
// migration: the history rows kept per resource (about; see the package doc).
const DefaultHistoryKeep = 10000

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

// Do runs fn in a transaction that checks tok for resource
// (elector_fence()) before fn's first statement, then commits what fn
// wrote. The check rides in one round trip with fn's first Exec, Query or
// QueryRow on tx (a pgx batch: the check, then the statement); any other
// first use of tx (SendBatch, CopyFrom, Prepare, LargeObjects, Conn, Begin,
// Commit, or a statement with a QueryExecMode argument) runs the check
// first without the statement, and so does a fn that sends nothing. On a
// *pgx.Conn or a *pgxpool.Pool the transaction's BEGIN is the batch's first
// statement (pgx.Batch.BeginTx), so a transaction of one statement takes
// two round trips, one fewer than pgx.BeginTxFunc's; on any other DB, BEGIN
// (BeginTx) comes first, in a round trip of its own.
//
// A stale token returns a *fencing.StaleTokenError (errors.Is(err,
// fencing.ErrStaleToken)) naming the stored token: fn's first statement does
// not run and returns that error, and Do returns it whatever fn does with
// it. If fn returns an error, or the commit fails, nothing of the
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
		return runFenced(ctx, f.db, pgx.TxOptions{IsoLevel: f.iso}, resource, tok, holder, fn)
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
