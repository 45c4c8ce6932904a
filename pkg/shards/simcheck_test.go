package shards

// The shard simulator's checker: what each process's app was told
// (Status), mapped onto the global clock, against the server's log. Per
// shard, as the election's simulator checks its one Lease:
//   - no instant at which two processes' answers both claim the shard
//     (a served token's window runs from the answer to its ValidUntil);
//   - a token value is served by one process only;
//   - a process's tokens for a shard never go backwards;
//   - every token served was committed on that shard's Lease (same UID)
//     naming that process's identity.

import (
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

type simWindow struct {
	proc        string
	token       int64
	from, until time.Duration
}

type simChecker struct {
	w         *simWorld
	committed map[string][]*coordinationv1.Lease // by shard Lease name
	windows   map[int][]*simWindow
	servedBy  map[int]map[int64]string
	last      map[string]map[int]int64 // proc -> shard -> highest token
	errs      []string
	samples   int
}

func newSimChecker(w *simWorld) *simChecker {
	return &simChecker{w: w, committed: map[string][]*coordinationv1.Lease{}, windows: map[int][]*simWindow{},
		servedBy: map[int]map[int64]string{}, last: map[string]map[int]int64{}}
}

func (c *simChecker) process(p *simProc) { c.last[p.name] = map[int]int64{} }

func (c *simChecker) commit(name string, l *coordinationv1.Lease, writer string) {
	if l == nil {
		return
	}
	if i, ok := shardIndex(c.w.cfg.Name, c.w.cfg.shards, l); ok && c.w.lastCommitted[name] == nil && (!c.knowerAlive(i) || c.blind(writer, i)) {
		// A reset, as the election's checker declares one: the Lease was
		// gone and no live process had seen its count, so nobody can
		// know which values were issued; or it was created by a member
		// that never saw it, before any member that saw it put it back
		// (the documented limit of a shard Lease deleted by hand).
		// Values may start over; answers still count.
		if len(c.servedBy[i]) > 0 {
			c.w.tracef(nil, "RESET of shard %d (its Lease and every process that saw it are gone)", i)
		}
		c.servedBy[i] = nil
	}
	c.committed[name] = append(c.committed[name], l)
}

// blind: the writer never saw shard i's Lease.
func (c *simChecker) blind(writer string, i int) bool {
	for _, p := range c.w.live() {
		if p.name == writer {
			return p.set.shards[i].maxSeen == 0
		}
	}
	return false
}

// knowerAlive reports whether a live process has seen shard i's count.
func (c *simChecker) knowerAlive(i int) bool {
	for _, p := range c.w.live() {
		if p.set.shards[i].maxSeen > 0 {
			return true
		}
	}
	return false
}

func (c *simChecker) failed() bool { return len(c.errs) > 0 }

func (c *simChecker) fail(format string, args ...any) {
	msg := fmt.Sprintf("at %.3fs: ", c.w.now.Seconds()) + fmt.Sprintf(format, args...)
	c.errs = append(c.errs, msg)
	c.w.tracef(nil, "VIOLATION %s", msg)
}

// sample records what p's app was just told.
func (c *simChecker) sample(p *simProc, st Status) {
	c.samples++
	for _, o := range st.Owned {
		c.serve(p, o.Index, o.Token, o.Lease, o.LeaseUID, p.toGlobal(o.ValidUntil))
	}
}

// unread records the shards p serves at this instant, which its app did
// not ask for: a window of one instant.
func (c *simChecker) unread(p *simProc, idx []int) {
	for _, i := range idx {
		sh := &p.set.shards[i]
		c.serve(p, i, transitionsOf(sh.obs), sh.obs.Name, string(sh.obs.UID), c.w.now)
	}
}

func (c *simChecker) serve(p *simProc, i int, token int64, lease, uid string, until time.Duration) {
	now := c.w.now
	if by, ok := c.servedBy[i][token]; ok && by != p.name {
		c.fail("shard %d token %d served by %s and by %s", i, token, by, p.name)
	}
	if c.servedBy[i] == nil {
		c.servedBy[i] = map[int64]string{}
	}
	c.servedBy[i][token] = p.name
	if prev := c.last[p.name][i]; token < prev {
		c.fail("%s served shard %d token %d after token %d", p.name, i, token, prev)
	}
	c.last[p.name][i] = max(c.last[p.name][i], token)
	found := false
	for _, l := range c.committed[lease] {
		if string(l.UID) == uid && transitionsOf(l) == token && holderOf(l) == p.id {
			found = true
			break
		}
	}
	if !found {
		c.fail("%s served shard %d token %d (uid %s), never committed naming it", p.name, i, token, uid)
	}
	var mine *simWindow
	for _, win := range c.windows[i] {
		if win.proc == p.name && win.token == token {
			mine = win
			continue
		}
		if win.proc != p.name && win.from <= now && now < win.until {
			c.fail("shard %d: %s serves token %d while %s's answer for token %d holds until %.3fs",
				i, p.name, token, win.proc, win.token, win.until.Seconds())
		}
		if win.proc != p.name && win.from == now && win.until == now {
			c.fail("shard %d: %s and %s both serve it at one instant", i, p.name, win.proc)
		}
	}
	if mine == nil {
		c.windows[i] = append(c.windows[i], &simWindow{proc: p.name, token: token, from: now, until: until})
		return
	}
	mine.until = max(mine.until, until)
}

// appStopped ends p's answers now: its app was stopped (a native sidecar
// with immediate shutdown handoff).
func (c *simChecker) appStopped(p *simProc) {
	for _, ws := range c.windows {
		for _, win := range ws {
			if win.proc == p.name && win.until > c.w.now {
				win.until = c.w.now
			}
		}
	}
}
