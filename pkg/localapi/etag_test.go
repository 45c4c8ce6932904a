package localapi

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
)

func getLeader(h http.Handler, ifNoneMatch string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", "/leader", nil)
	if ifNoneMatch != "" {
		req.Header.Set("If-None-Match", ifNoneMatch)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestLeaderETagChanges: every change of the /leader body other than
// expiresInMs counting down changes the ETag, and a client holding the old
// one gets the new body, not a 304.
func TestLeaderETagChanges(t *testing.T) {
	renewed := leading
	renewed.ValidUntil = leading.ValidUntil.Add(2 * time.Second) // a renew: the token runs 2s longer
	renewed.ExpiresIn = 2500 * time.Millisecond
	notReadyNobody := election.Status{Lease: "ns/l", Identity: "pod-b"}
	readyNobody := notReadyNobody
	readyNobody.Ready = true
	moreTransitions := following
	moreTransitions.LeaseTransitions++
	tests := []struct {
		name          string
		before, after election.Status
	}{
		{"not ready -> ready with no holder", notReadyNobody, readyNobody},
		{"leaseTransitions change (follower, same holder)", following, moreTransitions},
		{"renew: ValidUntil moves", leading, renewed},
		{"holder changes", following, func() election.Status { s := following; s.Holder = "pod-c"; return s }()},
		{"holder freed", following, nobody},
		{"identity changes", following, func() election.Status { s := following; s.Identity = "pod-x"; return s }()},
		{"lease changes", following, func() election.Status { s := following; s.Lease = "ns/other"; return s }()},
		{"token changes", leading, func() election.Status { s := leading; s.Token = 8; return s }()},
		{"leader -> holds but unsafe", leading, unsafe},
		{"ready -> not ready", following, func() election.Status { s := following; s.Ready = false; return s }()},
		{"holder bytes move between fields", election.Status{Lease: "ab", Identity: "c", Ready: true}, election.Status{Lease: "a", Identity: "bc", Ready: true}},
		{"leaves the election", following, withdrawn},
		{"back in the election", withdrawn, following},
		{"why it is out changes", withdrawn, func() election.Status { s := withdrawn; s.NotCandidate = "app unhealthy: timeout"; return s }()},
		{"app unhealthy -> released for", withdrawn, timedOut},
		{"time out ends", timedOut, func() election.Status { s := timedOut; s.NotCandidate, s.Candidate = "", true; return s }()},
		{"candidate flag alone", following, func() election.Status { s := following; s.Candidate = false; return s }()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			el := &fakeElector{status: tt.before, alive: true}
			h := NewHandler(el, nil)
			first := getLeader(h, "")
			tag := first.Header().Get("ETag")
			if tag == "" {
				t.Fatal("no ETag")
			}
			el.status = tt.after
			second := getLeader(h, tag)
			if second.Code != http.StatusOK {
				t.Fatalf("If-None-Match with the old ETag answered %d, want 200 (before %s, after %s)", second.Code, first.Body, tag)
			}
			if got := second.Header().Get("ETag"); got == tag {
				t.Fatalf("ETag %s unchanged; body %s -> %s", tag, first.Body, second.Body)
			}
		})
	}
}

// TestLeaderETagStable: nothing changed, or only expiresInMs counted down:
// same ETag, and If-None-Match gets a 304 with no body.
func TestLeaderETagStable(t *testing.T) {
	for name, s := range map[string]election.Status{"leading": leading, "following": following, "nobody": nobody, "not ready": notReady, "unsafe": unsafe, "zero": {},
		"withdrawn": withdrawn, "released for a while": timedOut} {
		t.Run(name, func(t *testing.T) {
			el := &fakeElector{status: s, alive: true}
			h := NewHandler(el, nil)
			tag := getLeader(h, "").Header().Get("ETag")
			if s.IsLeader {
				el.status.ExpiresIn -= 1700 * time.Millisecond // time passes, no renew
			}
			if s == timedOut {
				el.status.NotCandidate = "released for 4m57s" // the time out counts down
			}
			for _, inm := range []string{tag, "W/" + tag, `"other", ` + tag, "*"} {
				rec := getLeader(h, inm)
				if rec.Code != http.StatusNotModified || rec.Body.Len() != 0 {
					t.Fatalf("If-None-Match %s: code %d body %q, want 304 and no body", inm, rec.Code, rec.Body)
				}
				if got := rec.Header().Get("ETag"); got != tag {
					t.Fatalf("ETag %s -> %s with nothing changed", tag, got)
				}
			}
			if rec := getLeader(h, `"other"`); rec.Code != http.StatusOK {
				t.Fatalf("a foreign ETag answered %d", rec.Code)
			}
		})
	}
}

// TestLeaderETagIsAFunctionOfTheBody: over many random statuses drawn from
// small domains (so that equal bodies recur), two statuses have the same ETag
// exactly when their /leader bodies, without expiresInMs and the countdown
// of a "released for" notCandidate, and their ValidUntil are equal.
func TestLeaderETagIsAFunctionOfTheBody(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	bodyOf := map[string]string{} // ETag -> body key
	tagOf := map[string]string{}  // body key -> ETag
	for i := 0; i < 20000; i++ {
		s := election.Status{
			Lease:            pick("ns/l", "ns/m"),
			Identity:         pick("pod-a", "pod-b"),
			Ready:            rng.IntN(2) == 0,
			Holder:           pick("", "pod-a", "pod-b", `p"<&>`),
			LeaseTransitions: rng.Int64N(3),
			LeaseUID:         pick("u1", "u2"), // not in the body: must not matter
			NotCandidate:     pick("", "", "app unhealthy", "app unhealthy: 500", "released for 4m59s", "released for 3s"),
		}
		s.Candidate = s.NotCandidate == ""
		app := appState(rng.IntN(3))
		if rng.IntN(2) == 0 {
			s.IsLeader = true
			s.Token = 1 + rng.Int64N(3)
			s.ValidUntil = time.Unix(1000+rng.Int64N(3), 0)
			s.ExpiresIn = time.Duration(1+rng.Int64N(5000)) * time.Millisecond
		}
		r := newLeaderResponse(&s, app)
		r.ExpiresInMs = 0
		if strings.HasPrefix(r.NotCandidate, "released for ") {
			r.NotCandidate = "released for (counting down)"
		}
		key := string(r.AppendJSON(nil)) + " " + s.ValidUntil.String()
		tag := leaderETag(&s, app, 0)
		if prev, ok := tagOf[key]; ok && prev != tag {
			t.Fatalf("body %s has two ETags %s and %s", key, prev, tag)
		}
		if prev, ok := bodyOf[tag]; ok && prev != key {
			t.Fatalf("ETag %s for two bodies:\n%s\n%s", tag, prev, key)
		}
		tagOf[key], bodyOf[tag] = tag, key
	}
	if len(tagOf) < 100 {
		t.Fatalf("only %d distinct bodies drawn", len(tagOf))
	}
}

func TestLeaderETagAllocs(t *testing.T) {
	s := leading
	s.Holder = "billing-7d9c-abcde"
	s.NotCandidate = "app unhealthy: Get \"http://127.0.0.1:8080/healthz\": connection refused"
	s.LeaseTransitions, s.Token = -1<<63, -1<<63 // the longest numbers
	if n := testing.AllocsPerRun(100, func() { _ = leaderETag(&s, appUnhealthy, 0) }); n > 1 {
		t.Fatalf("leaderETag: %v allocations, want at most 1 (the string)", n)
	}
}

// TestLeaderETagCoversAppHealth: with an app health source, "appHealthy"
// is in the body and its change changes the ETag; without one it is absent.
func TestLeaderETagCoversAppHealth(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	el := &fakeElector{status: following, alive: true}
	h := NewHandler(el, nil, WithAppHealth(healthy.Load))
	first := getLeader(h, "")
	if !strings.Contains(first.Body.String(), `"appHealthy":true`) {
		t.Fatalf("body %s without appHealthy:true", first.Body)
	}
	tag := first.Header().Get("ETag")
	if rec := getLeader(h, tag); rec.Code != http.StatusNotModified {
		t.Fatalf("unchanged: %d", rec.Code)
	}
	healthy.Store(false)
	second := getLeader(h, tag)
	if second.Code != http.StatusOK || !strings.Contains(second.Body.String(), `"appHealthy":false`) {
		t.Fatalf("after the app turned unhealthy: %d %s", second.Code, second.Body)
	}
	if second.Header().Get("ETag") == tag {
		t.Fatalf("ETag %s unchanged when the app turned unhealthy", tag)
	}
	plain := getLeader(NewHandler(el, nil), "")
	if strings.Contains(plain.Body.String(), "appHealthy") {
		t.Fatalf("appHealthy without a source: %s", plain.Body)
	}
	if plain.Header().Get("ETag") == tag || plain.Header().Get("ETag") == second.Header().Get("ETag") {
		t.Fatal("the ETag does not tell an absent appHealthy from a present one")
	}
}
