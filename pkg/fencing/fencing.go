// Package fencing is the resource owner's side of leader election: a fence
// that accepts a write only if its fencing token is at least the highest token
// the resource has already accepted, and, for the same value, only under the
// Lease (UID) that value was first accepted from.
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
	"strconv"
)

// ErrStaleToken is matched (errors.Is) by every rejection of a stale token:
// one lower than the highest token the resource has accepted, or the same
// value issued under a different Lease (see CheckToken).
var ErrStaleToken = errors.New("stale fencing token")

// ErrConflict is returned by Store.Commit when the resource changed since it
// was loaded; Fence retries on it.
var ErrConflict = errors.New("fenced resource changed concurrently")

// Token is a fencing token as the sidecar serves it (GET /token): Value is
// the Lease's spec.leaseTransitions, LeaseUID the metadata.uid of the Lease
// that issued it. An empty LeaseUID means "unknown": only the value is
// checked.
//
// The UID catches a token value issued twice: if the Lease is deleted and
// recreated, its count can start again, and a second leader can be handed a
// value the resource has already accepted from the first. Values alone cannot
// tell the two apart; the UIDs can.
type Token struct {
	Value    int64
	LeaseUID string
}

func (t Token) String() string {
	if t.LeaseUID == "" {
		return strconv.FormatInt(t.Value, 10)
	}
	return fmt.Sprintf("%d (lease UID %s)", t.Value, t.LeaseUID)
}

// StaleTokenError says which token was rejected and which token the resource
// had already accepted. LeaseUID and HighestLeaseUID are set when the token
// was rejected because its value equals Highest but it was issued under a
// different Lease (SameValueOtherLease reports that case).
type StaleTokenError struct {
	Token   int64
	Highest int64
	// LeaseUID is the rejected token's Lease UID ("" if unknown).
	LeaseUID string
	// HighestLeaseUID is the Lease UID recorded with Highest ("" if unknown).
	HighestLeaseUID string
}

// SameValueOtherLease reports whether the token was rejected because the same
// value had already been accepted under another Lease (not because it was
// lower).
func (e *StaleTokenError) SameValueOtherLease() bool {
	return e.Token == e.Highest && e.LeaseUID != "" && e.HighestLeaseUID != "" && e.LeaseUID != e.HighestLeaseUID
}

func (e *StaleTokenError) Error() string {
	if e.SameValueOtherLease() {
		return fmt.Sprintf("stale fencing token %d: issued under lease UID %s, but the resource already accepted token %d under lease UID %s "+
			"(the same value issued twice by a deleted and recreated Lease; the later one is not trusted)",
			e.Token, e.LeaseUID, e.Highest, e.HighestLeaseUID)
	}
	return fmt.Sprintf("stale fencing token %d: resource already accepted token %d", e.Token, e.Highest)
}

// Is makes errors.Is(err, ErrStaleToken) true.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// Check is the value-only fencing rule: a token is accepted if it is at least
// the highest token accepted so far (the same leader writes many times with
// one token). Tokens are never negative. It is CheckToken without Lease UIDs.
func Check(highest, token int64) error {
	return CheckToken(Token{Value: highest}, Token{Value: token})
}

// CheckToken is the fencing rule with Lease UIDs. A token is stale
// (errors.Is(err, ErrStaleToken), a *StaleTokenError) if
//
//   - its value is lower than the highest accepted, or
//   - its value equals the highest accepted, both carry a LeaseUID, and the
//     UIDs differ: the same value was issued under two Leases, and the one the
//     resource saw second must not be trusted.
//
// A higher value is accepted whatever its UID. An empty UID on either side
// falls back to the value-only rule (Check). Negative values are invalid.
func CheckToken(highest, token Token) error {
	if token.Value < 0 {
		return fmt.Errorf("invalid fencing token %d: must not be negative", token.Value)
	}
	stale := &StaleTokenError{Token: token.Value, Highest: highest.Value, LeaseUID: token.LeaseUID, HighestLeaseUID: highest.LeaseUID}
	if token.Value < highest.Value || stale.SameValueOtherLease() {
		return stale
	}
	return nil
}

// Accept applies CheckToken and returns the token a store records as its new
// highest: token itself, except that for an equal value an unknown (empty)
// LeaseUID never erases a known one. Stores call it in Commit so that no
// caller can lower the highest token or drop its UID.
func Accept(highest, token Token) (Token, error) {
	if err := CheckToken(highest, token); err != nil {
		return Token{}, err
	}
	if token.Value == highest.Value && token.LeaseUID == "" {
		token.LeaseUID = highest.LeaseUID
	}
	return token, nil
}

// Store is a real resource that can compare-and-swap: an etcd key, a
// ConfigMap (resourceVersion), a SQL row with a version column, a file
// guarded by a lock. It keeps the highest accepted token, with its Lease UID,
// next to the value.
type Store interface {
	// Load returns the highest token the resource has accepted (with the
	// Lease UID recorded with it, "" if unknown), its value, and an opaque
	// version for Commit.
	Load(ctx context.Context) (highest Token, value []byte, version string, err error)
	// Commit records token (value and Lease UID) as the highest accepted
	// token and writes value, in one atomic step, if the resource is still at
	// version. It returns an error matching ErrConflict if the resource moved
	// on.
	Commit(ctx context.Context, version string, token Token, value []byte) error
}

// DefaultMaxAttempts bounds how often Fence.Write retries on ErrConflict.
const DefaultMaxAttempts = 16

// Fence writes to a Store only with a token that passes CheckToken.
type Fence struct {
	store       Store
	maxAttempts int
}

// New returns a Fence over s.
func New(s Store) *Fence {
	return &Fence{store: s, maxAttempts: DefaultMaxAttempts}
}

// Write stores value if token is not stale, for a caller that has no Lease
// UID: it is WriteToken(ctx, Token{Value: token}, value), the value-only rule.
func (f *Fence) Write(ctx context.Context, token int64, value []byte) error {
	return f.WriteToken(ctx, Token{Value: token}, value)
}

// WriteToken stores value if token is not stale (CheckToken): pass the token
// and the leaseUID from the sidecar's GET /token. A stale token returns a
// *StaleTokenError (errors.Is(err, ErrStaleToken)) and changes nothing.
// Concurrent writers are serialised by the store's compare-and-swap;
// WriteToken retries a lost race after reloading, so the check always runs
// against the token it replaces.
func (f *Fence) WriteToken(ctx context.Context, token Token, value []byte) error {
	var lastErr error
	for attempt := 0; attempt < f.maxAttempts; attempt++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("fenced write with token %s: %w", token, err)
		}
		highest, _, version, err := f.store.Load(ctx)
		if err != nil {
			return fmt.Errorf("fenced write with token %s: load: %w", token, err)
		}
		record, err := Accept(highest, token)
		if err != nil {
			return err
		}
		err = f.store.Commit(ctx, version, record, value)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ErrConflict) {
			return fmt.Errorf("fenced write with token %s: commit: %w", token, err)
		}
		lastErr = err
	}
	return fmt.Errorf("fenced write with token %s: gave up after %d attempts: %w", token, f.maxAttempts, lastErr)
}
