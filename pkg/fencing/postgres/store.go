package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
)

// Stored returns the highest token accepted for resource, with its Lease UID
// (token 0 if resource was never fenced).
func (f *Fence) Stored(ctx context.Context, resource string) (fencing.Token, error) {
	tok, _, _, err := f.Store(resource, "").Load(ctx)
	return tok, err
}

// Entry is one accepted check in elector_fence_history.
type Entry struct {
	// ID orders the entries of one resource: tokens never go down in it.
	ID          int64
	Token       fencing.Token
	Holder      string
	CommittedAt time.Time
}

// History returns resource's rows of elector_fence_history, oldest first
// (what pruning kept: see elector_fence_settings in the package doc).
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

// Commit implements fencing.Store: in one transaction, elector_fence()
// checks and records tok (with a history row) and the value is written with
// version + 1; if the resource is no longer at version, the transaction
// rolls back and Commit returns an error matching fencing.ErrConflict. A
// stale token is a *fencing.StaleTokenError.
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
		return runFenced(ctx, s.f.db, pgx.TxOptions{IsoLevel: s.f.iso}, s.resource, tok, s.holder, func(tx pgx.Tx) error {
			var got int64
			if err := tx.QueryRow(ctx, "UPDATE elector_fence SET value = $2, version = version + 1 WHERE resource = $1 RETURNING version",
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
