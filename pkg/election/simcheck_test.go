package election

// The global-clock checker: the app's claims (token answers handed out,
// each a promise until its ExpiresIn runs out on the global clock, unless
// the app gave the token back) judged against the API server's own log.
// It is the successor of harness_test.go's tokenLog, which judges Status at
// instants on one shared clock; this one takes the instants, the processes
// and the committed writes from the caller, so stepped tests can feed it
// too.

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// simClaimer is one process as the checker knows it.
type simClaimer struct {
	name, id string
	until    time.Duration // its latest claim runs out then (global)
	token    int64
	uid      string
	from     time.Duration
}

type simCommitKey struct {
	writer, uid string
	transitions int64
}

// simChecker checks, on the global clock:
//  1. no two processes hold an unexpired claim at the same moment;
//  2. no token value is served by two processes (across Lease UIDs);
//  3. every token served is the leaseTransitions of a committed write on
//     that UID by that process, naming its identity (the log decides,
//     not the answers: a write whose answer was lost counts if it landed);
//  4. a token first served later is above every token served before,
//     except across a declared reset.
type simChecker struct {
	procs     []*simClaimer
	byName    map[string]*simClaimer
	owner     map[int64]string // token -> process, this epoch
	commits   map[simCommitKey]bool
	maxServed int64
	epoch     int
	claims    int
}

func newSimChecker() *simChecker {
	return &simChecker{byName: map[string]*simClaimer{}, owner: map[int64]string{}, commits: map[simCommitKey]bool{}}
}

// process registers a process (an incarnation) and its identity.
func (c *simChecker) process(name, id string) {
	p := &simClaimer{name: name, id: id}
	c.procs = append(c.procs, p)
	c.byName[name] = p
}

// commit takes one entry of the server's log.
func (c *simChecker) commit(e simCommit) {
	if p := c.byName[e.writer]; p != nil && e.lease != nil && e.holder == p.id {
		c.commits[simCommitKey{e.writer, e.uid, e.transitions}] = true
	}
}

// claim records that process name answered its app at global time at:
// leader with token on uid, valid until until (global).
func (c *simChecker) claim(name string, token int64, uid string, at, until time.Duration) error {
	p := c.byName[name]
	if p == nil {
		return fmt.Errorf("claim by unknown process %s", name)
	}
	c.claims++
	if !c.commits[simCommitKey{name, uid, token}] {
		return fmt.Errorf("invariant 3: %s serves token %d on %s, which no committed write of its own holds", name, token, uid)
	}
	if o, ok := c.owner[token]; ok && o != name {
		return fmt.Errorf("invariant 2: token %d served by %s and by %s", token, o, name)
	} else if !ok {
		if token <= c.maxServed {
			return fmt.Errorf("invariant 4: %s serves new token %d, not above %d served before", name, token, c.maxServed)
		}
		c.owner[token] = name
		c.maxServed = token
	}
	for _, q := range c.procs {
		if q != p && q.until > at {
			return fmt.Errorf("invariant 1: at %.3fs %s claims token %d (%s) until %.3fs while %s's claim of token %d (%s, from %.3fs) runs until %.3fs",
				at.Seconds(), name, token, uid, until.Seconds(), q.name, q.token, q.uid, q.from.Seconds(), q.until.Seconds())
		}
	}
	if token != p.token || uid != p.uid || p.until <= at {
		p.from = at
	}
	p.until, p.token, p.uid = max(p.until, until), token, uid
	return nil
}

// observe is claim for a Status the app read at global time at from a
// process whose clock runs at rate against the global clock (1: one shared
// clock, as in the stepped tests). ExpiresIn is on the process's clock.
func (c *simChecker) observe(name string, s Status, at time.Duration, rate float64) error {
	if !s.IsLeader {
		return nil
	}
	return c.claim(name, s.Token, s.LeaseUID, at, at+time.Duration(math.Ceil(float64(s.ExpiresIn)/rate)))
}

// handBack: the app of process name gave its token back at at (release
// on request, or exited before an immediate shutdown handoff).
func (c *simChecker) handBack(name string, at time.Duration) {
	if p := c.byName[name]; p != nil && p.until > at {
		p.until = at
	}
}

// reset starts a new epoch: tokens may start over (claims still count).
func (c *simChecker) reset() {
	c.epoch++
	c.owner = map[int64]string{}
	c.maxServed = 0
}

// The checker must be able to fail: hand-made histories, each breaking one
// invariant, and one that breaks none.
func TestSimCheckerCatchesHandMadeViolations(t *testing.T) {
	s := time.Second
	setup := func() *simChecker {
		c := newSimChecker()
		c.process("a#1", "a")
		c.process("b#1", "b")
		c.process("a#2", "a")
		c.commit(simCommit{writer: "a#1", uid: "u1", holder: "a", transitions: 1, lease: heldLease("a", 1)})
		c.commit(simCommit{writer: "b#1", uid: "u1", holder: "b", transitions: 2, lease: heldLease("b", 2)})
		c.commit(simCommit{writer: "b#1", uid: "u2", holder: "b", transitions: 1, lease: heldLease("b", 1)})
		c.commit(simCommit{writer: "a#2", uid: "u1", holder: "a", transitions: 3, lease: heldLease("a", 3)})
		return c
	}
	type claim struct {
		name  string
		token int64
		uid   string
		at    time.Duration
		until time.Duration
	}
	tests := []struct {
		name     string
		handBack string
		claims   []claim
		want     string // "": no violation
	}{
		{"handoff after expiry", "", []claim{{"a#1", 1, "u1", 0, 3 * s}, {"b#1", 2, "u1", 3 * s, 6 * s}}, ""},
		{"overlapping claims", "", []claim{{"a#1", 1, "u1", 0, 3 * s}, {"b#1", 2, "u1", 2 * s, 5 * s}}, "invariant 1"},
		{"twins overlap", "", []claim{{"a#1", 1, "u1", 0, 3 * s}, {"a#2", 3, "u1", 1 * s, 4 * s}}, "invariant 1"},
		{"one token, two processes, two UIDs", "", []claim{{"b#1", 1, "u2", 0, 1 * s}, {"a#1", 1, "u1", 5 * s, 6 * s}}, "invariant 2"},
		{"a token nobody wrote", "", []claim{{"a#1", 2, "u1", 0, 1 * s}}, "invariant 3"},
		{"a twin serves the other's token", "", []claim{{"a#2", 1, "u1", 0, 1 * s}}, "invariant 3"},
		{"tokens go backwards", "", []claim{{"b#1", 2, "u1", 0, 1 * s}, {"a#1", 1, "u1", 5 * s, 6 * s}}, "invariant 4"},
		{"given back, then taken", "a#1", []claim{{"a#1", 1, "u1", 0, 3 * s}, {"b#1", 2, "u1", 1 * s, 4 * s}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := setup()
			var err error
			for i, cl := range tt.claims {
				if i == 1 && tt.handBack != "" {
					c.handBack(tt.handBack, cl.at)
				}
				if err = c.claim(cl.name, cl.token, cl.uid, cl.at, cl.until); err != nil {
					break
				}
			}
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected violation: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v, want %s", err, tt.want)
			}
		})
	}
}
