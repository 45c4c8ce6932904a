package main

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing/httpstore"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// report prints the single-Lease soak's counts and checks the invariants;
// false if one broke.
func (s *soak) report() bool {
	terms := s.g.Sampler.Terms()
	samples := s.g.Sampler.Samples()
	writes := s.store.Writes()
	var history []historyRow
	var historyErr error
	if s.db.history != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		history, historyErr = s.db.history(ctx)
		cancel()
	}

	type key struct {
		target string
		token  int64
	}
	leaderships := map[key]bool{}
	var maxTok int64
	for _, t := range terms {
		leaderships[key{t.Target, t.Token}] = true
		maxTok = max(maxTok, t.Token)
	}
	maxTok = max(maxTok, s.highest())

	// Time with a leader: the union of the narrow term windows.
	var covered time.Duration
	var end time.Time
	for _, t := range terms {
		a, b := t.FirstRecv, t.LastSent
		if !b.After(a) {
			continue
		}
		if a.Before(end) {
			a = end
		}
		if b.After(a) {
			covered += b.Sub(a)
			end = b
		}
	}
	span := time.Duration(0)
	if len(samples) > 0 {
		span = samples[len(samples)-1].Received.Sub(s.g.Sampler.Start)
	}

	fmt.Println()
	fmt.Println("==== chaos soak results ====")
	fmt.Printf("duration            %v (faults for %v, seed %d)\n", time.Since(s.start).Round(time.Second), s.o.duration, s.o.seed)
	fmt.Printf("faults              %s\n", s.faultCounts())
	fmt.Printf("processes started   %d (newcomers %d)\n", len(s.g.All()), len(s.newcomerList()))
	fmt.Printf("store               %s\n", s.db.describe)
	s.printWrites("")
	if s.db.restart != nil {
		fmt.Printf("errors during a database restart  %d (restarts: %d; expected: writes fail while %s is down)\n",
			s.dbRestartErrs.Load(), s.countOf("db-restart"), s.db.name)
	}
	fmt.Printf("leader changes      %d (distinct process+token terms: %d)\n", max(len(leaderships)-1, 0), len(leaderships))
	fmt.Printf("max token           %d\n", maxTok)
	fmt.Printf("/token samples      %d\n", len(samples))
	if span > 0 {
		fmt.Printf("time with a leader  %.1f%% of %v\n", 100*covered.Seconds()/span.Seconds(), span.Round(time.Second))
	}

	iv := &invariants{ok: true}
	// 1. accepted writes in commit order never go down in token.
	var accepted []httpstore.Write
	for _, w := range writes {
		if w.Accepted {
			accepted = append(accepted, w)
		}
	}
	sort.Slice(accepted, func(i, j int) bool { return accepted[i].Seq < accepted[j].Seq })
	if s.db.history == nil {
		var p1 []string
		var high int64
		for _, w := range accepted {
			if w.Token < high {
				p1 = append(p1, fmt.Sprintf("commit #%d by %s with token %d after token %d", w.Seq, w.Writer, w.Token, high))
			}
			high = max(high, w.Token)
		}
		iv.check("no accepted write with a token lower than one accepted before", p1)
	} else {
		// From the database's own record, not the writers' or the HTTP store's.
		var p1, p1b []string
		var rec reconciliation
		if historyErr != nil {
			p1 = []string{"reading the database's history: " + historyErr.Error()}
			p1b = p1
		} else {
			p1 = checkHistory(history)
			rec, p1b = reconcile(int64(len(history)), int64(len(accepted)), s.accepted.Load(), s.writeErrs.Load())
			fmt.Printf("database history    %d rows; %s\n", len(history), rec)
		}
		iv.check(fmt.Sprintf("no accepted write with a token lower than one accepted before (from %s's own history, %d rows)", s.db.name, len(history)), p1)
		iv.check("the database's history holds every accepted write, plus only writes with an unknown outcome", p1b)
	}

	// 2. and 3. the sampler.
	overlaps, possible := framework.CheckNoOverlap(terms, s.g.Sampler.Start)
	iv.check("no two processes provably serving a valid token at one instant", details(overlaps))
	fmt.Printf("possible overlaps   %d (terms the calls' delays cannot order; not violations)\n", len(possible))
	iv.check("tokens served later are greater", details(framework.CheckTokenOrder(terms, s.g.Sampler.Start)))

	// 4. one process per accepted token.
	byToken := tokenWriters{}
	for _, w := range accepted {
		byToken.add(w.Token, w.Writer)
	}
	iv.check("every accepted token came from one process", byToken.problems())

	// 5. one process per served token value, over the whole run.
	iv.check("no two processes ever served the same token value", details(framework.CheckDistinctTokens(samples, s.g.Sampler.Start)))
	iv.check("no process served a higher token while another's answer still claimed validity", s.checkClaims(samples))
	if !iv.ok {
		fmt.Println("terms:")
		fmt.Print(framework.FormatTerms(terms, s.g.Sampler.Start))
	}
	return iv.result()
}
