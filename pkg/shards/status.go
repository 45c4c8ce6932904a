package shards

import "time"

// Status is what the local API serves about a set, at one instant.
type Status struct {
	// Set is "namespace/name"; Identity is this member's; Shards is N.
	Set      string
	Identity string
	Shards   int
	// Ready: the set's Leases have been listed since start.
	Ready bool
	// Live: this member's session is valid (it may hold shards).
	Live bool
	// Members are the live members as this member sees them, sorted.
	Members []string
	// Owned are the shards this member may work on now, by index.
	Owned []Owned
}

// Owned is one shard this member holds, with a token safe to use now.
type Owned struct {
	Index    int
	Lease    string // the shard's Lease name
	LeaseUID string
	Token    int64
	// ValidUntil is the instant (on the member's clock) the token stops;
	// ExpiresIn the validity left when Status was taken.
	ValidUntil time.Time
	ExpiresIn  time.Duration
}

// Shard returns the owned shard i, if this member holds it.
func (s Status) Shard(i int) (Owned, bool) {
	for _, o := range s.Owned {
		if o.Index == i {
			return o, true
		}
	}
	return Owned{}, false
}
