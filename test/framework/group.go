package framework

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Group is a set of candidates for one Lease. Every instance it starts is
// added to its Sampler (if set) and kept, so logs of dead instances stay
// available for failure messages.
type Group struct {
	// Template is copied for each member; Identity is set per member.
	Template CandidateSpec
	// Sampler, if set, samples every instance the group starts.
	Sampler *Sampler

	mu      sync.Mutex
	current map[string]*Candidate // identity -> latest instance
	all     []*Candidate
}

// NewGroup returns a group with a running sampler (interval 20ms).
func NewGroup(template CandidateSpec) *Group {
	return &Group{Template: template, Sampler: NewSampler(0), current: map[string]*Candidate{}}
}

// Start starts a candidate with identity from the template (the previous
// instance with that identity, if any, is not stopped: see Restart).
func (g *Group) Start(ctx context.Context, identity string) (*Candidate, error) {
	spec := g.Template
	spec.Identity = identity
	return g.StartSpec(ctx, spec)
}

// StartSpec starts a candidate from a full spec (e.g. another Kind or Binary).
func (g *Group) StartSpec(ctx context.Context, spec CandidateSpec) (*Candidate, error) {
	c, err := StartCandidate(ctx, spec)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.current[spec.Identity] = c
	g.all = append(g.all, c)
	g.mu.Unlock()
	if g.Sampler != nil {
		g.Sampler.AddCandidate(c)
	}
	return c, nil
}

// StartAll starts one candidate per identity.
func (g *Group) StartAll(ctx context.Context, identities ...string) ([]*Candidate, error) {
	var out []*Candidate
	for _, id := range identities {
		c, err := g.Start(ctx, id)
		if err != nil {
			return out, err
		}
		out = append(out, c)
	}
	return out, nil
}

// Get returns the latest instance of identity (nil if none).
func (g *Group) Get(identity string) *Candidate {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.current[identity]
}

// Running returns the latest instances that have not exited, by identity.
func (g *Group) Running() []*Candidate {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*Candidate
	for _, c := range g.current {
		if !c.Exited() {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Identity() < out[j].Identity() })
	return out
}

// All returns every instance ever started, in start order.
func (g *Group) All() []*Candidate {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*Candidate(nil), g.all...)
}

// WaitForLeader polls /token of every running candidate not in exclude until
// one returns a token, and returns it with that response.
func (g *Group) WaitForLeader(ctx context.Context, timeout time.Duration, exclude ...*Candidate) (*Candidate, TokenResult, error) {
	ex := map[*Candidate]bool{}
	for _, c := range exclude {
		ex[c] = true
	}
	var leader *Candidate
	var res TokenResult
	err := Poll(ctx, 25*time.Millisecond, timeout, func(ctx context.Context) (bool, error) {
		for _, c := range g.Running() {
			if ex[c] {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			r := c.Token(rctx)
			cancel()
			if r.Valid() {
				leader, res = c, r
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, TokenResult{}, fmt.Errorf("no leader (excluding %v): %w:\n%s", exclude, err, g.Describe(context.WithoutCancel(ctx)))
	}
	return leader, res, nil
}

// Leaders returns the running candidates whose /token returns a token right now.
func (g *Group) Leaders(ctx context.Context) []*Candidate {
	var out []*Candidate
	for _, c := range g.Running() {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		r := c.Token(rctx)
		cancel()
		if r.Valid() {
			out = append(out, c)
		}
	}
	return out
}

// Describe returns /leader and /token of every running candidate, for failure messages.
func (g *Group) Describe(ctx context.Context) string {
	var b strings.Builder
	for _, c := range g.Running() {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		l, lerr := c.Leader(rctx)
		t := c.Token(rctx)
		cancel()
		if lerr != nil {
			fmt.Fprintf(&b, "  %s: /leader error %v; /token %s\n", c.Instance, lerr, t)
		} else {
			fmt.Fprintf(&b, "  %s: isLeader=%v holder=%q transitions=%d; /token %s\n", c.Instance, l.IsLeader, l.Holder, l.LeaseTransitions, t)
		}
	}
	return b.String()
}

// Logs returns the last lines of every instance's log, for failure messages.
func (g *Group) Logs(lines int) string {
	var b strings.Builder
	for _, c := range g.All() {
		state := "running"
		if code, ok := c.ExitCode(); ok {
			state = fmt.Sprintf("exited %d", code)
		}
		fmt.Fprintf(&b, "----- %s (%s, %s) -----\n%s\n", c.Instance, state, c.LogPath, c.LogTail(lines))
	}
	return b.String()
}

// StopAll stops every instance (SIGCONT, SIGTERM, SIGKILL after grace) and the sampler.
func (g *Group) StopAll(grace time.Duration) {
	var wg sync.WaitGroup
	for _, c := range g.All() {
		wg.Add(1)
		go func(c *Candidate) {
			defer wg.Done()
			c.Stop(grace)
		}(c)
	}
	wg.Wait()
	if g.Sampler != nil {
		g.Sampler.Stop()
	}
}
