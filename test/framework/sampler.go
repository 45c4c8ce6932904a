package framework

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Sample is one GET /token call made by a Sampler.
type Sample struct {
	Target string // candidate instance (identity#n)
	TokenResult
}

// Term is a run of consecutive valid (200) samples from one target with the
// same token: the target claimed to lead with Token at least over
// [FirstRecv, LastSent] and at most over [FirstSent, LastRecv].
type Term struct {
	Target    string
	Token     int64
	Count     int
	FirstSent time.Time
	FirstRecv time.Time
	LastSent  time.Time
	LastRecv  time.Time
}

// Window is the widest interval the term may have covered: [FirstSent, LastRecv].
func (t Term) Window() (time.Time, time.Time) { return t.FirstSent, t.LastRecv }

// Sampler polls GET /token of every target concurrently (one goroutine and one
// connection per target) and records each call with the sampler's monotonic
// timestamps, so claims from different processes can be compared on one clock.
type Sampler struct {
	// Interval between two calls to the same target (default 20ms).
	Interval time.Duration
	Start    time.Time

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	targets map[string]context.CancelFunc
	samples []Sample
	stopped bool
}

// NewSampler returns a running sampler with no targets.
func NewSampler(interval time.Duration) *Sampler {
	if interval <= 0 {
		interval = 20 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Sampler{Interval: interval, Start: time.Now(), ctx: ctx, cancel: cancel, targets: map[string]context.CancelFunc{}}
}

// Add starts sampling a target (name must be unique: use Candidate.Instance).
// The sampler uses its own client, so its calls never queue behind others.
func (s *Sampler) Add(name, baseURL string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || s.targets[name] != nil {
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	s.targets[name] = cancel
	client := NewAPIClient(baseURL)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer client.Close()
		for ctx.Err() == nil {
			r := client.Token(ctx)
			if ctx.Err() != nil && r.Err != nil {
				return // cancelled mid-call: not a sample
			}
			s.mu.Lock()
			s.samples = append(s.samples, Sample{Target: name, TokenResult: r})
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-time.After(s.Interval):
			}
		}
	}()
}

// AddCandidate samples c until it exits (or Remove / Stop).
func (s *Sampler) AddCandidate(c *Candidate) {
	s.Add(c.Instance, c.URL)
	go func() {
		select {
		case <-c.Done():
			// let a call that was in flight when the process died finish
			time.Sleep(50 * time.Millisecond)
			s.Remove(c.Instance)
		case <-s.ctx.Done():
		}
	}()
}

// Remove stops sampling a target; its samples are kept.
func (s *Sampler) Remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cancel := s.targets[name]; cancel != nil {
		cancel()
		delete(s.targets, name)
	}
}

// Stop stops all sampling and waits for the goroutines.
func (s *Sampler) Stop() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

// Samples returns a copy of all samples so far, in the order they completed.
func (s *Sampler) Samples() []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Sample(nil), s.samples...)
}

// SamplesOf returns the samples of one target.
func (s *Sampler) SamplesOf(target string) []Sample {
	var out []Sample
	for _, x := range s.Samples() {
		if x.Target == target {
			out = append(out, x)
		}
	}
	return out
}

// Rel formats t as milliseconds since the sampler started.
func (s *Sampler) Rel(t time.Time) string {
	return fmt.Sprintf("+%dms", t.Sub(s.Start).Milliseconds())
}

// Terms groups the samples into terms, ordered by FirstSent.
func (s *Sampler) Terms() []Term { return TermsOf(s.Samples()) }

// TermsOf groups samples into terms (see Term), ordered by FirstSent.
func TermsOf(samples []Sample) []Term {
	byTarget := map[string][]Sample{}
	for _, x := range samples {
		byTarget[x.Target] = append(byTarget[x.Target], x)
	}
	var terms []Term
	for target, xs := range byTarget {
		sort.SliceStable(xs, func(i, j int) bool { return xs[i].Sent.Before(xs[j].Sent) })
		var cur *Term
		for _, x := range xs {
			if !x.Valid() {
				if cur != nil {
					terms = append(terms, *cur)
					cur = nil
				}
				continue
			}
			if cur != nil && cur.Token != x.Token {
				terms = append(terms, *cur)
				cur = nil
			}
			if cur == nil {
				cur = &Term{Target: target, Token: x.Token, FirstSent: x.Sent, FirstRecv: x.Received}
			}
			cur.Count++
			cur.LastSent, cur.LastRecv = x.Sent, x.Received
		}
		if cur != nil {
			terms = append(terms, *cur)
		}
	}
	sort.Slice(terms, func(i, j int) bool { return terms[i].FirstSent.Before(terms[j].FirstSent) })
	return terms
}

// Violation is a broken invariant found in the samples.
type Violation struct {
	Kind   string // "overlap" or "token-order"
	Detail string
}

func (v Violation) String() string { return v.Kind + ": " + v.Detail }

// CheckNoOverlap returns every pair of terms of different targets that
// provably served at one instant ("definite"). A term's answers were made at
// instants inside their calls, so it served over at least [the instant of
// its first answer, that of its last], each somewhere in its call. Two terms
// a and b can be told apart (one ended before the other began) if a's last
// call was sent before b's first answer came back (a then b) or the other way
// round: a.LastSent < b.FirstRecv or b.LastSent < a.FirstRecv. A pair for
// which neither holds served at one instant, whatever the calls' delays.
//
// The second result is every other pair whose widest windows [FirstSent,
// LastRecv] intersect ("possible"): the answers may have been made apart, and
// the calls' delays hide which. They are not violations: on a loaded machine
// a call takes longer than a direct handoff's gap between two terms (a few
// ms), so a correct handoff shows as one. Tests log them.
func CheckNoOverlap(terms []Term, start time.Time) (definite, possible []Violation) {
	for i := 0; i < len(terms); i++ {
		for j := i + 1; j < len(terms); j++ {
			a, b := terms[i], terms[j]
			if a.Target == b.Target || !a.FirstSent.Before(b.LastRecv) || !b.FirstSent.Before(a.LastRecv) {
				continue
			}
			if a.LastSent.Before(b.FirstRecv) || b.LastSent.Before(a.FirstRecv) {
				possible = append(possible, Violation{Kind: "overlap", Detail: fmt.Sprintf("(possible) %s and %s", fmtTerm(a, start), fmtTerm(b, start))})
				continue
			}
			definite = append(definite, Violation{Kind: "overlap", Detail: fmt.Sprintf("(definite) %s and %s", fmtTerm(a, start), fmtTerm(b, start))})
		}
	}
	return definite, possible
}

// CheckTokenOrder returns every pair of terms where a later term (starting
// after the earlier one's window ended) has a token that is not greater,
// except the same target keeping its token.
func CheckTokenOrder(terms []Term, start time.Time) []Violation {
	var vs []Violation
	for i := 0; i < len(terms); i++ {
		for j := 0; j < len(terms); j++ {
			a, b := terms[i], terms[j]
			if i == j || a.LastRecv.After(b.FirstSent) {
				continue
			}
			if b.Token > a.Token || (a.Target == b.Target && a.Token == b.Token) {
				continue
			}
			vs = append(vs, Violation{Kind: "token-order", Detail: fmt.Sprintf("%s came after %s", fmtTerm(b, start), fmtTerm(a, start))})
		}
	}
	return vs
}

// Check stops nothing; it checks the three invariants over all samples so
// far (no two processes provably serving a valid token at one instant,
// tokens served later are greater, no token value served by two processes)
// and returns an error describing every violation (nil if none).
func (s *Sampler) Check() error {
	samples := s.Samples()
	terms := TermsOf(samples)
	vs, _ := CheckNoOverlap(terms, s.Start)
	vs = append(vs, CheckTokenOrder(terms, s.Start)...)
	vs = append(vs, CheckDistinctTokens(samples, s.Start)...)
	if len(vs) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d invariant violation(s) in %d samples:\n", len(vs), len(samples))
	for i, v := range vs {
		if i == 20 {
			fmt.Fprintf(&b, "  ... and %d more\n", len(vs)-20)
			break
		}
		fmt.Fprintf(&b, "  %s\n", v)
	}
	b.WriteString("terms:\n" + FormatTerms(terms, s.Start))
	return fmt.Errorf("%s", b.String())
}

// PossibleOverlaps returns the pairs of terms that CheckNoOverlap can neither
// prove nor rule out (the calls' delays hide the order), for the log.
func (s *Sampler) PossibleOverlaps() []Violation {
	_, possible := CheckNoOverlap(TermsOf(s.Samples()), s.Start)
	return possible
}

func fmtTerm(t Term, start time.Time) string {
	return fmt.Sprintf("%s token %d [%s..%s] (%d samples)", t.Target, t.Token,
		rel(t.FirstSent, start), rel(t.LastRecv, start), t.Count)
}

func rel(t, start time.Time) string { return fmt.Sprintf("+%dms", t.Sub(start).Milliseconds()) }

// FormatTerms renders terms one per line.
func FormatTerms(terms []Term, start time.Time) string {
	var b strings.Builder
	for _, t := range terms {
		fmt.Fprintf(&b, "  %s\n", fmtTerm(t, start))
	}
	return b.String()
}

// FirstValidAfter returns the first valid sample sent at or after t from any
// target not in exclude.
func (s *Sampler) FirstValidAfter(t time.Time, exclude ...string) (Sample, bool) {
	ex := map[string]bool{}
	for _, e := range exclude {
		ex[e] = true
	}
	var best Sample
	found := false
	for _, x := range s.Samples() {
		if !x.Valid() || ex[x.Target] || x.Sent.Before(t) {
			continue
		}
		if !found || x.Received.Before(best.Received) {
			best, found = x, true
		}
	}
	return best, found
}

// CheckDistinctTokens returns one violation per token value that valid
// samples of more than one target carried: over the whole run a token value
// may be served by one process only (the same process keeps it across blips).
// Unlike CheckTokenOrder it does not depend on the order of the terms, so it
// also catches two processes serving the same value at overlapping instants,
// and it names the Lease UIDs each served it under (the same value under two
// UIDs means a deleted Lease's count was issued again on its successor).
func CheckDistinctTokens(samples []Sample, start time.Time) []Violation {
	type served struct {
		first, last time.Time
		count       int
		uids        []string
	}
	byToken := map[int64]map[string]*served{}
	for _, x := range samples {
		if !x.Valid() {
			continue
		}
		ts := byToken[x.Token]
		if ts == nil {
			ts = map[string]*served{}
			byToken[x.Token] = ts
		}
		sv := ts[x.Target]
		if sv == nil {
			sv = &served{first: x.Sent, last: x.Received}
			ts[x.Target] = sv
		}
		if x.Sent.Before(sv.first) {
			sv.first = x.Sent
		}
		if x.Received.After(sv.last) {
			sv.last = x.Received
		}
		sv.count++
		if !slices.Contains(sv.uids, x.LeaseUID) {
			sv.uids = append(sv.uids, x.LeaseUID)
		}
	}
	var tokens []int64
	for tok, ts := range byToken {
		if len(ts) > 1 {
			tokens = append(tokens, tok)
		}
	}
	sort.Slice(tokens, func(i, j int) bool { return tokens[i] < tokens[j] })
	var vs []Violation
	for _, tok := range tokens {
		ts := byToken[tok]
		targets := make([]string, 0, len(ts))
		for t := range ts {
			targets = append(targets, t)
		}
		sort.Slice(targets, func(i, j int) bool { return ts[targets[i]].first.Before(ts[targets[j]].first) })
		parts := make([]string, 0, len(targets))
		for _, t := range targets {
			sv := ts[t]
			parts = append(parts, fmt.Sprintf("%s (Lease UID %s, [%s..%s], %d samples)", t, strings.Join(sv.uids, ","),
				rel(sv.first, start), rel(sv.last, start), sv.count))
		}
		vs = append(vs, Violation{Kind: "same-token", Detail: fmt.Sprintf("token %d served by %d processes: %s", tok, len(targets), strings.Join(parts, " and "))})
	}
	return vs
}
