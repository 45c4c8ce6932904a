package shards

import (
	"context"
	"errors"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
)

// Errors of Release.
var (
	// ErrNoSuchShard: the index is not in 0 … N-1.
	ErrNoSuchShard = errors.New("no such shard")
	// ErrNotHeld: this member does not hold the shard.
	ErrNotHeld = errors.New("shard not held by this member")
)

// Config is one member's: the election's settings for every Lease of the
// set (Name is the set's name), and the number of shards.
type Config struct {
	election.Config
	// Shards is N: the set is the Leases <Name>-0 … <Name>-(N-1).
	Shards int
}

// Set is one member of a shard set. Create it with New, run it with Run,
// read it with Status from any goroutine.
type Set struct {
	cfg Config
}

// New validates cfg and returns a member that has not started yet.
func New(cfg Config) (*Set, error) { return &Set{cfg: cfg}, nil }

// Run takes part in the set until ctx is done, then hands every shard it
// holds to the other members and ends its session.
func (s *Set) Run(ctx context.Context) error { <-ctx.Done(); return nil }

// Status is the set as this member sees it now.
func (s *Set) Status() Status { return Status{} }

// Changed returns a channel closed when Status may have changed (including
// when a validity runs out with no Lease event).
func (s *Set) Changed() <-chan struct{} { return make(chan struct{}) }

// Release gives shard i back: its token stops at once and the shard goes
// to another member (to this one again, with a new token, if it is alone).
func (s *Set) Release(ctx context.Context, i int) error { return ErrNotHeld }

// SetCandidate takes this member out of the set (every shard handed over,
// its session released) or back in.
func (s *Set) SetCandidate(ctx context.Context, ok bool, reason string) error { return nil }

// Alive reports whether Run is running.
func (s *Set) Alive() bool { return false }
