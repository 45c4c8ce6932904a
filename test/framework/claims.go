package framework

import (
	"fmt"
	"sort"
	"time"
)

// The token's promise to the app, checked from the outside: a valid GET
// /token answer tells the caller how long it may use the token
// (expiresInMs). The answer sent at Sent with expiresInMs E claims validity
// until Sent+E (the sidecar measured E after the request left, so Sent+E is
// the earliest the claim can end: the claim is read in the sidecar's
// favour). While that claim runs, no other process may serve a higher
// token: a request to another process that returns 200 with a higher token
// must have been sent at or after the claim's end (read against the other
// process: the request's send time is the earliest it may have been served).
//
// A POST /release sent by the app to the claiming process gives the token
// back: it ends the claims of every answer of that process sent before the
// release call returned, at the moment the release was sent (an answer sent
// while the release was in flight claims nothing).

// ReleaseCall is one POST /release the app sent to Target: sent at Sent,
// answered at Received.
type ReleaseCall struct {
	Target   string
	Sent     time.Time
	Received time.Time
}

// ClaimEnd returns until when the valid answer a claimed its token: its
// Sent+ExpiresInMs, cut by the first release of a's target that returned
// after a was sent.
func ClaimEnd(a Sample, releases []ReleaseCall) time.Time {
	end := a.Sent.Add(time.Duration(a.ExpiresInMs) * time.Millisecond)
	var cut *ReleaseCall
	for i := range releases {
		r := &releases[i]
		if r.Target != a.Target || !r.Received.After(a.Sent) {
			continue
		}
		if cut == nil || r.Received.Before(cut.Received) {
			cut = r
		}
	}
	if cut != nil {
		end = earliest(end, latest(cut.Sent, a.Sent))
	}
	return end
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// CheckClaims returns one violation per (claiming process, token, serving
// process, token) pair where a process served a higher token to a request
// sent before another process's answer had stopped claiming validity
// (ClaimEnd). "definite": the higher token's answer was even received
// before the claim's end; "possible": only sent before it.
func CheckClaims(samples []Sample, releases []ReleaseCall, start time.Time) []Violation {
	type claim struct {
		end time.Time
		a   Sample
	}
	byToken := map[int64][]Sample{}
	for _, x := range samples {
		if x.Valid() {
			byToken[x.Token] = append(byToken[x.Token], x)
		}
	}
	tokens := make([]int64, 0, len(byToken))
	for tok := range byToken {
		tokens = append(tokens, tok)
	}
	sort.Slice(tokens, func(i, j int) bool { return tokens[i] < tokens[j] })

	// The latest-ending claim of each target over all tokens below the
	// current one; a served answer is checked against the latest-ending
	// claim of any other target.
	open := map[string]claim{}
	type key struct {
		claimant, server string
		ctoken, stoken   int64
	}
	type found struct {
		c         claim
		b         Sample
		count     int
		definite  bool
		worstLead time.Duration
	}
	var order []key
	viol := map[key]*found{}
	for _, tok := range tokens {
		for _, b := range byToken[tok] {
			var best *claim
			for target, c := range open {
				if target == b.Target {
					continue
				}
				if best == nil || c.end.After(best.end) {
					cc := c
					best = &cc
				}
			}
			if best == nil || !b.Sent.Before(best.end) {
				continue
			}
			k := key{best.a.Target, b.Target, best.a.Token, b.Token}
			f := viol[k]
			if f == nil {
				f = &found{c: *best, b: b}
				viol[k] = f
				order = append(order, k)
			}
			f.count++
			if b.Received.Before(best.end) {
				f.definite = true
			}
			if lead := best.end.Sub(b.Sent); lead > f.worstLead {
				f.worstLead, f.c, f.b = lead, *best, b
			}
		}
		for _, a := range byToken[tok] {
			end := ClaimEnd(a, releases)
			if c, ok := open[a.Target]; !ok || end.After(c.end) {
				open[a.Target] = claim{end: end, a: a}
			}
		}
	}
	vs := make([]Violation, 0, len(order))
	for _, k := range order {
		f := viol[k]
		kind := "possible"
		if f.definite {
			kind = "definite"
		}
		vs = append(vs, Violation{Kind: "claim", Detail: fmt.Sprintf(
			"(%s) %s's answer with token %d (sent %s, expiresInMs %d) claimed validity until %s; %s served token %d to %d request(s) sent before that, the earliest %v before (sent %s, received %s)",
			kind, f.c.a.Target, f.c.a.Token, rel(f.c.a.Sent, start), f.c.a.ExpiresInMs, rel(f.c.end, start),
			f.b.Target, f.b.Token, f.count, f.worstLead.Round(time.Millisecond), rel(f.b.Sent, start), rel(f.b.Received, start))})
	}
	return vs
}
