package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// shardHistory reads elector_fence_history of every shard's resource, in
// the database's order, by shard.
func (ss *shardSoak) shardHistory(ctx context.Context) (map[int][]historyRow, int64, error) {
	conn, err := pgx.Connect(ctx, ss.dbURL)
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	rs, err := conn.Query(ctx, `SELECT id, resource, token, coalesce(lease_uid, ''), coalesce(holder, '')
		FROM elector_fence_history WHERE resource LIKE 'chaos-shard-%' ORDER BY id`)
	if err != nil {
		return nil, 0, err
	}
	byShard := map[int][]historyRow{}
	var total int64
	for rs.Next() {
		var id int64
		var res string
		var r historyRow
		if err := rs.Scan(&id, &res, &r.Token, &r.LeaseUID, &r.Writer); err != nil {
			return nil, 0, err
		}
		i, err := strconv.Atoi(strings.TrimPrefix(res, "chaos-shard-"))
		if err != nil {
			return nil, 0, fmt.Errorf("history row %d: resource %q", id, res)
		}
		r.ID = strconv.FormatInt(id, 10)
		byShard[i] = append(byShard[i], r)
		total++
	}
	return byShard, total, rs.Err()
}

// report prints the counts and checks the invariants per shard; false if
// one broke.
func (ss *shardSoak) report() bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	history, historyRows, historyErr := ss.shardHistory(ctx)
	cancel()
	ss.smu.Lock()
	samples := ss.samples
	ss.smu.Unlock()

	terms := make([][]framework.Term, ss.n)
	moves, nsamples := 0, 0
	var maxTok int64
	minAcc, maxAcc := int64(-1), int64(0)
	for i := range ss.n {
		terms[i] = framework.TermsOf(samples[i])
		nsamples += len(samples[i])
		distinct := map[string]bool{}
		for _, t := range terms[i] {
			distinct[fmt.Sprintf("%s/%d", t.Target, t.Token)] = true
			maxTok = max(maxTok, t.Token)
		}
		moves += max(len(distinct)-1, 0)
		a := ss.shardAccepted[i].Load()
		if minAcc < 0 || a < minAcc {
			minAcc = a
		}
		maxAcc = max(maxAcc, a)
	}

	fmt.Println()
	fmt.Println("==== chaos soak results (shard set) ====")
	fmt.Printf("duration            %v (faults for %v, seed %d)\n", time.Since(ss.start).Round(time.Second), ss.o.duration, ss.o.seed)
	fmt.Printf("shards              %d over %d candidates\n", ss.n, ss.o.candidates)
	fmt.Printf("faults              %s\n", ss.faultCounts())
	fmt.Printf("processes started   %d\n", len(ss.g.All()))
	fmt.Printf("store               PostgreSQL on %s, a resource per shard\n", ss.db.addr)
	ss.printWrites(fmt.Sprintf(" (per shard: %d to %d)", minAcc, maxAcc))
	fmt.Printf("errors during a database restart  %d (restarts: %d)\n", ss.dbRestartErrs.Load(), ss.countOf("db-restart"))
	fmt.Printf("shard moves         %d (distinct process+token terms beyond the first, summed over shards)\n", moves)
	fmt.Printf("max token           %d\n", maxTok)
	fmt.Printf("/shards samples     %d (per-shard entries)\n", nsamples)

	iv := &invariants{ok: true}
	check := iv.check
	perShard := func(f func(i int) []string) []string {
		var out []string
		for i := range ss.n {
			for _, p := range f(i) {
				out = append(out, fmt.Sprintf("shard %d: %s", i, p))
			}
		}
		return out
	}

	// 1. from the database's own history, per shard; and the history holds
	// every accepted write.
	if historyErr != nil {
		check("no accepted write with a token lower than one accepted before (per shard, from PostgreSQL's history)",
			[]string{"reading the database's history: " + historyErr.Error()})
	} else {
		check(fmt.Sprintf("no accepted write with a token lower than one accepted before (per shard, from PostgreSQL's history, %d rows)", historyRows),
			perShard(func(i int) []string { return checkHistory(history[i]) }))
		rec, p := reconcile(historyRows, ss.accepted.Load(), ss.accepted.Load(), ss.writeErrs.Load())
		fmt.Printf("database history    %d rows; %s\n", historyRows, rec)
		check("the database's history holds every accepted write, plus only writes with an unknown outcome", p)
	}
	// 2., 3., 5., 6.: the /shards samples, per shard.
	check("no two processes provably serving a shard's valid token at one instant (per shard)", perShard(func(i int) []string {
		overlaps, _ := framework.CheckNoOverlap(terms[i], ss.start)
		return details(overlaps)
	}))
	check("tokens served later are greater (per shard)", perShard(func(i int) []string {
		return details(framework.CheckTokenOrder(terms[i], ss.start))
	}))
	// 4. one process per accepted token, from the history's writer column.
	check("every accepted token came from one process (per shard)", perShard(func(i int) []string {
		by := tokenWriters{}
		for _, r := range history[i] {
			by.add(r.Token, r.Writer)
		}
		return by.problems()
	}))
	check("no two processes ever served the same token value (per shard)", perShard(func(i int) []string {
		return details(framework.CheckDistinctTokens(samples[i], ss.start))
	}))
	check("no process served a higher token while another's answer still claimed validity (per shard)", perShard(func(i int) []string {
		return details(framework.CheckClaims(samples[i], nil, ss.start))
	}))
	check("every shard was written", perShard(func(i int) []string {
		if ss.shardAccepted[i].Load() == 0 {
			return []string{"no accepted write"}
		}
		return nil
	}))
	if !iv.ok {
		for i := range ss.n {
			fmt.Printf("shard %d terms:\n%s", i, framework.FormatTerms(terms[i], ss.start))
		}
	}
	return iv.result()
}
