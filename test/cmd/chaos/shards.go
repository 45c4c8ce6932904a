package main

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// The shard soak (--shards=N; `make chaos SHARDS=16`): the candidates run
// elector-sidecar --shards=N, so the set's N shards are spread over them,
// each shard with its own Lease and fencing token. Each candidate has a
// fenced writer that writes, as fast as it can, once per shard its process
// owns (GET /shards), with that shard's token, to that shard's own resource
// in PostgreSQL (chaos-shard-<i>: SELECT elector_fence(resource, token,
// lease_uid, writer) in a transaction); a writer frozen with its process
// writes late with the tokens it held. The faults are the ones that apply to
// a set: SIGKILL, SIGSTOP+SIGCONT, SIGTERM (the member hands its shards off),
// restarts with the same identity, apiserver restarts and a database restart.
// Every process's GET /shards is sampled too; the invariants are the
// single-Lease soak's, per shard:
//
//  1. the resource never accepted a token lower than one it had accepted
//     before (from elector_fence_history, per shard), and the history holds
//     every accepted write plus at most the writes whose outcome the writers
//     could not know;
//  2. no two processes served a valid token of the shard at overlapping instants;
//  3. the shard's tokens served later are greater;
//  4. every token the resource accepted came from one process;
//  5. no two processes ever served the same token value of the shard;
//  6. no process served a higher token of the shard while another's answer
//     still claimed validity;
//
// and every shard was written.

// shardResource is shard i's fenced resource.
func shardResource(i int) string { return "chaos-shard-" + strconv.Itoa(i) }

// heldShard is one shard a writer got from its process's /shards.
type heldShard struct {
	index int
	token int64
	uid   string
}

type shardSoak struct {
	*soak
	n       int
	dbURL   string
	httpc   *http.Client
	pollCtx context.Context

	smu     sync.Mutex
	samples [][]framework.Sample // per shard: each process's answers (framework.Sample: Target, token, validity)
	polled  map[string]bool      // instances with a poller
	pollers sync.WaitGroup

	heldMu sync.Mutex
	held   map[string]heldAnswer // slot id -> the writer's last answer

	shardAccepted []atomic.Int64
}

// heldAnswer is a writer's last /shards answer, for the late writes of a
// SIGSTOP fault.
type heldAnswer struct {
	instance string
	at       time.Time
	shards   []heldShard
}

func runShards(ctx context.Context, o options) (bool, error) {
	s, err := newSoak(o, "elector-chaos-shards-")
	if err != nil {
		return false, err
	}
	s.logf("chaos soak of a shard set: %d candidates with --shards=%d, %v of faults (mean every %v), seed %d, timings %+v, store %s; logs in %s",
		o.candidates, o.shards, o.duration, o.faultEvery, o.seed, o.timings, o.store, s.logDir)
	binary, stop, err := s.setUp(ctx)
	if err != nil {
		return false, err
	}
	defer stop()
	s.logf("fenced store: PostgreSQL on %s, one resource per shard (chaos-shard-<i>), history in elector_fence_history", s.db.addr)

	s.g = framework.NewGroup(s.candidateSpec(binary, "--shards="+strconv.Itoa(o.shards)))
	s.g.Sampler.Stop()
	s.g.Sampler = nil // /token is the single Lease's; the shard soak samples /shards
	pctx, stopPolling := context.WithCancel(context.Background())
	defer stopPolling()
	ss := &shardSoak{soak: s, n: o.shards, dbURL: s.db.url, pollCtx: pctx,
		httpc:   &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}},
		samples: make([][]framework.Sample, o.shards), polled: map[string]bool{}, held: map[string]heldAnswer{},
		shardAccepted: make([]atomic.Int64, o.shards)}
	defer s.stopCandidates()
	if err := s.startCandidates(ctx); err != nil {
		return false, err
	}
	go ss.pollNewInstances()
	if err := ss.waitAllOwned(ctx, 60*time.Second); err != nil {
		return false, err
	}
	s.logf("every shard owned; starting writers and faults")

	wctx, stopWriters := context.WithCancel(context.Background())
	for _, sl := range s.slots {
		s.writers.Add(1)
		go func() { defer s.writers.Done(); ss.writer(wctx, sl) }()
	}
	fctx, stopFaults := context.WithTimeout(ctx, o.duration)
	s.restartDBMidRun(fctx, nil)
	s.faultLoop(fctx, ss.inject, nil)
	stopFaults()
	s.settle("set")
	if err := ss.waitAllOwned(context.Background(), 60*time.Second); err != nil {
		s.logf("after the soak: %v", err)
	}
	time.Sleep(o.timings.LeaseDuration)
	stopWriters()
	s.writers.Wait()
	stopPolling()
	ss.pollers.Wait()

	return s.verdict(ctx, ss.report())
}

// writer writes, as fast as it can, once per shard its slot's process owns,
// with that shard's token. If the process is paused after the writer got its
// answer, the writer freezes too and writes late with the tokens it holds.
func (ss *shardSoak) writer(ctx context.Context, sl *slot) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	for ctx.Err() == nil {
		c := ss.g.Get(sl.id)
		if c == nil || c.Exited() {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		b, code, err := ss.getShards(ctx, c)
		var held []heldShard
		if err == nil && code == http.StatusOK {
			for _, o := range b.Owned {
				if o.ExpiresInMs > 0 {
					held = append(held, heldShard{o.Index, o.Token, o.LeaseUID})
				}
			}
		}
		if len(held) == 0 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		ss.heldMu.Lock()
		ss.held[sl.id] = heldAnswer{instance: c.Instance, at: time.Now(), shards: held}
		ss.heldMu.Unlock()
		sl.mu.Lock()
		paused, resume := sl.paused, sl.resume
		sl.mu.Unlock()
		if !thawed(ctx, paused, resume) { // frozen with the tokens in hand, like its process
			return
		}
		for _, h := range held {
			_, _ = ss.write(&conn, h, c.Instance) // counted by write
		}
	}
}

// errStale is elector_fence()'s SQLSTATE for a stale token.
const errStale = "EF001"

// write sends one fenced write of shard h with its token, as writer; the
// outcome is counted. Not cancelled by the end of the soak: a write in
// flight finishes, so its outcome is known.
func (ss *shardSoak) write(conn **pgx.Conn, h heldShard, writer string) (accepted bool, err error) {
	ss.attempted.Add(1)
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if *conn == nil || (*conn).IsClosed() {
		if *conn, err = pgx.Connect(ctx, ss.dbURL); err != nil {
			*conn = nil
			ss.writeError(began, err)
			return false, err
		}
	}
	err = pgx.BeginFunc(ctx, *conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT elector_fence($1, $2, $3, $4)", shardResource(h.index), h.token, h.uid, writer)
		return err
	})
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		ss.accepted.Add(1)
		ss.shardAccepted[h.index].Add(1)
		return true, nil
	case errors.As(err, &pgErr) && pgErr.Code == errStale:
		ss.stale.Add(1)
		return false, err
	}
	ss.writeError(began, err)
	if !errors.As(err, &pgErr) { // the connection broke (a database restart): a new one next time
		_ = (*conn).Close(context.Background())
		*conn = nil
	}
	return false, err
}

// shardFaults and their weights: the single-Lease soak's faults that apply
// to a set (no Lease deletions or hand edits: a shard set's Leases are its own).
var (
	shardFaults       = []string{"sigkill", "sigstop", "sigterm", "restart", "apiserver-restart", "db-restart"}
	shardFaultWeights = []int{3, 3, 2, 2, 1, 1}
)

func (ss *shardSoak) inject() {
	kind := ss.drawFault(shardFaults, shardFaultWeights)
	if ss.injectSoakFault(kind) {
		return
	}
	candidates := ss.available()
	if len(candidates) == 0 {
		return
	}
	sl := candidates[ss.intn(len(candidates))]
	c := ss.g.Get(sl.id)
	if c == nil {
		return
	}
	ss.processFault(sl, c, kind, func() bool { return true }, ss.freeze)
}

// freeze SIGSTOPs c (its writer freezes with it) and returns the SIGCONT;
// a writer that had just got its tokens writes them late after it.
func (ss *shardSoak) freeze(sl *slot, c *framework.Candidate) func() {
	sl.pause(c)
	ss.heldMu.Lock()
	h := ss.held[sl.id]
	ss.heldMu.Unlock()
	inFlight := h.instance == c.Instance && time.Since(h.at) < 200*time.Millisecond
	return func() {
		sl.unpause(c)
		if inFlight {
			ss.lateWrites(c.Instance, h.shards)
		}
	}
}

// lateWrites sends the writes a frozen writer had in flight, with the
// tokens it held before the pause.
func (ss *shardSoak) lateWrites(instance string, shards []heldShard) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	for _, x := range shards {
		ok, err := ss.write(&conn, x, instance)
		result := "accepted (the shard did not move during the pause)"
		if !ok {
			result = "rejected: " + errOr(err, "?")
		}
		ss.logf("late write by %s on shard %d with token %d after the pause: %s", instance, x.index, x.token, result)
	}
}
