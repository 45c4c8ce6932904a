package shards

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/clock"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
	"github.com/elector-sidecar/elector-sidecar/pkg/kubeclient"
)

// Errors of Release.
var (
	// ErrNoSuchShard: the index is not in 0 … N-1.
	ErrNoSuchShard = errors.New("no such shard")
	// ErrNotHeld: this member does not hold the shard.
	ErrNotHeld = errors.New("shard not held by this member")
)

// MaxShards bounds Config.Shards.
const MaxShards = 10000

// Config is one member's: the election's settings for every Lease of the
// set (Name is the set's name), and the number of shards.
type Config struct {
	election.Config
	// Shards is N: the set is the Leases <Name>-0 … <Name>-(N-1).
	Shards int
}

// Validate checks the set's settings and the election's.
func (c *Config) Validate() field.ErrorList {
	errs := c.Config.Validate()
	if c.Shards < 1 || c.Shards > MaxShards {
		errs = append(errs, field.Invalid(field.NewPath("shards"), c.Shards, fmt.Sprintf("must be between 1 and %d", MaxShards)))
	}
	if msgs := validation.IsValidLabelValue(c.Name); len(msgs) > 0 {
		errs = append(errs, field.Invalid(field.NewPath("leaseName"), c.Name, "a shard set's name is a label value: at most 63 characters"))
	} else if c.Shards > 0 {
		if msgs := validation.IsDNS1123Subdomain(ShardLeaseName(c.Name, c.Shards-1)); len(msgs) > 0 {
			errs = append(errs, field.Invalid(field.NewPath("leaseName"), c.Name, "shard Lease names: "+msgs[0]))
		}
	}
	return errs
}

// Set is one member of a shard set. Create it with New, run it with Run,
// read it with Status from any goroutine.
type Set struct {
	cfg         Config
	clock       clock.WithTicker
	log         *slog.Logger
	leases      kubeclient.LeaseInterface
	metrics     *metrics
	session     *election.Elector
	sessionName string

	serial  bool // writes one at a time, in order (the simulator)
	notify  chan struct{}
	control chan control
	started atomic.Bool
	alive   atomic.Bool

	inboxMu sync.Mutex
	inbox   []event

	// Status and the loop's gives share mu: a shard's validity handed out
	// (handedOut) is read after the loop stopped serving the shard.
	mu        sync.Mutex
	snap      snapshot
	handedOut []time.Time
	changed   chan struct{}

	// Owned by the loop.
	synced    bool
	syncedAt  time.Time
	members   map[string]*member // by session Lease name
	shards    []shard
	confirmAt time.Time // the next confirming list (confirm.go)
	// setExisted: our latest list found shard Leases of the set (takeAt).
	setExisted bool
	leaving    string // why we leave the set ("": we stay)
	withdrawn  string // SetCandidate(false)'s reason
}

type control struct {
	do    func(ctx context.Context) error
	reply chan error
}

// New validates cfg and returns a member that has not started yet.
func New(cfg Config) (*Set, error) {
	if errs := cfg.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("invalid shard set config: %w", errs.ToAggregate())
	}
	if cfg.Client == nil {
		return nil, errors.New("invalid shard set config: client must be set")
	}
	s := &Set{
		cfg:         cfg,
		clock:       cfg.Clock,
		log:         cfg.Logger,
		leases:      cfg.Client.Leases(cfg.Namespace),
		sessionName: MemberLeaseName(cfg.Name, cfg.Identity),
		notify:      make(chan struct{}, 1),
		control:     make(chan control),
		handedOut:   make([]time.Time, cfg.Shards),
		changed:     make(chan struct{}),
		members:     map[string]*member{},
		shards:      make([]shard, cfg.Shards),
	}
	if s.clock == nil {
		s.clock = clock.RealClock{}
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.log = s.log.With("shardSet", cfg.Namespace+"/"+cfg.Name, "identity", cfg.Identity)
	sc := cfg.Config
	sc.Name = s.sessionName
	sc.ExternalWatch = true
	sc.OwnLease = true // shards name a session by UID and term: a new one is a new term
	sc.DirectHandoff = false
	sc.ExpectedCandidates = 1
	sc.Clock = s.clock
	sc.LeaseLabels = s.labels(RoleMember)
	sc.StartWithdrawn = cfg.StartWithdrawn
	el, err := election.New(sc)
	if err != nil {
		return nil, err
	}
	s.session = el
	if s.metrics, err = newMetrics(cfg.Registerer, s); err != nil {
		return nil, fmt.Errorf("registering shard metrics: %w", err)
	}
	return s, nil
}

// labels are the set's labels for a Lease of this role (and the
// configured LeaseLabels).
func (s *Set) labels(role string) map[string]string {
	l := maps.Clone(s.cfg.LeaseLabels)
	if l == nil {
		l = map[string]string{}
	}
	l[SetLabel], l[RoleLabel] = s.cfg.Name, role
	return l
}

func (s *Set) shardLabels(i int) map[string]string {
	l := s.labels(RoleShard)
	l[IndexLabel] = strconv.Itoa(i)
	return l
}

// Session is this member's session candidate (its Lease is
// MemberLeaseName): the sidecar serves its metrics and health.
func (s *Set) Session() *election.Elector { return s.session }

// Changed returns a channel closed when Status may have changed (including
// when a validity runs out with no Lease event).
func (s *Set) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Alive reports whether Run is running.
func (s *Set) Alive() bool { return s.alive.Load() }

// Release gives shard i back: its token stops at once and the shard goes
// to the member holding the fewest (to this one again, with a new token,
// if it is alone).
func (s *Set) Release(ctx context.Context, i int) error {
	if i < 0 || i >= s.cfg.Shards {
		return fmt.Errorf("%w: %d (the set has %d)", ErrNoSuchShard, i, s.cfg.Shards)
	}
	return s.inLoop(ctx, func(ctx context.Context) error { return s.release(ctx, i) })
}

// SetCandidate takes this member out of the set (every shard handed over,
// its session released) or back in.
func (s *Set) SetCandidate(ctx context.Context, ok bool, reason string) error {
	return s.inLoop(ctx, func(ctx context.Context) error {
		if ok {
			s.withdrawn = ""
			if s.leaving == "" {
				return s.session.SetCandidate(ctx, true, "")
			}
			return nil
		}
		s.withdrawn = reason
		s.leave(ctx, reason)
		return s.session.SetCandidate(ctx, false, reason)
	})
}

func (s *Set) inLoop(ctx context.Context, do func(context.Context) error) error {
	c := control{do: do, reply: make(chan error, 1)}
	select {
	case s.control <- c:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-c.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
