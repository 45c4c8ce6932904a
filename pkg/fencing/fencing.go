// Package fencing is the resource owner's side of leader election: a fence
// that accepts a write only if its fencing token is at least the highest token
// the resource has already accepted.
//
// A lease alone never prevents split brain: a leader that was paused (GC,
// SIGSTOP, a network stall) past its lease can wake up still believing it
// leads. The fencing token issued with each acquisition grows every time
// leadership is taken, so the resource itself can reject the stale leader's
// write. The check and the write must be one atomic step at the resource; a
// Store provides that step and a Fence drives it.
package fencing

import (
	"context"
	"errors"
	"fmt"
)

// ErrStaleToken is matched (errors.Is) by every rejection of a token that is
// lower than the highest token the resource has accepted.
var ErrStaleToken = errors.New("stale fencing token")

// ErrConflict is returned by Store.Commit when the resource changed since it
// was loaded; Fence retries on it.
var ErrConflict = errors.New("fenced resource changed concurrently")

// StaleTokenError says which token was rejected and which token the resource
// had already accepted.
type StaleTokenError struct {
	Token   int64
	Highest int64
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("stale fencing token %d: resource already accepted token %d", e.Token, e.Highest)
}

// Is makes errors.Is(err, ErrStaleToken) true.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// Check is the fencing rule: a token is accepted if it is at least the
// highest token accepted so far (the same leader writes many times with one
// token). Tokens are never negative.
func Check(highest, token int64) error {
	if token < 0 {
		return fmt.Errorf("invalid fencing token %d: must not be negative", token)
	}
	if token < highest {
		return &StaleTokenError{Token: token, Highest: highest}
	}
	return nil
}

// Store is a real resource that can compare-and-swap: an etcd key, a
// ConfigMap (resourceVersion), a SQL row with a version column, a file
// guarded by a lock. It keeps the highest accepted token next to the value.
type Store interface {
	// Load returns the highest token the resource has accepted, its value,
	// and an opaque version for Commit.
	Load(ctx context.Context) (highest int64, value []byte, version string, err error)
	// Commit records token as the highest accepted token and writes value,
	// in one atomic step, if the resource is still at version. It returns an
	// error matching ErrConflict if the resource moved on.
	Commit(ctx context.Context, version string, token int64, value []byte) error
}

// DefaultMaxAttempts bounds how often Fence.Write retries on ErrConflict.
const DefaultMaxAttempts = 16

// Fence writes to a Store only with a token that passes Check.
type Fence struct {
	store       Store
	maxAttempts int
}

// New returns a Fence over s.
func New(s Store) *Fence {
	return &Fence{store: s, maxAttempts: DefaultMaxAttempts}
}

// Write stores value if token is not stale. A stale token returns a
// *StaleTokenError (errors.Is(err, ErrStaleToken)) and changes nothing.
// Concurrent writers are serialised by the store's compare-and-swap; Write
// retries a lost race after reloading, so the check always runs against the
// value it replaces.
func (f *Fence) Write(ctx context.Context, token int64, value []byte) error {
	var lastErr error
	for attempt := 0; attempt < f.maxAttempts; attempt++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("fenced write with token %d: %w", token, err)
		}
		highest, _, version, err := f.store.Load(ctx)
		if err != nil {
			return fmt.Errorf("fenced write with token %d: load: %w", token, err)
		}
		if err := Check(highest, token); err != nil {
			return err
		}
		err = f.store.Commit(ctx, version, token, value)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ErrConflict) {
			return fmt.Errorf("fenced write with token %d: commit: %w", token, err)
		}
		lastErr = err
	}
	return fmt.Errorf("fenced write with token %d: gave up after %d attempts: %w", token, f.maxAttempts, lastErr)
}
