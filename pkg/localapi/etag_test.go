package localapi

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
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
	for name, s := range map[string]election.Status{"leading": leading, "following": following, "nobody": nobody, "not ready": notReady, "unsafe": unsafe, "zero": {}} {
		t.Run(name, func(t *testing.T) {
			el := &fakeElector{status: s, alive: true}
			h := NewHandler(el, nil)
			tag := getLeader(h, "").Header().Get("ETag")
			if s.IsLeader {
				el.status.ExpiresIn -= 1700 * time.Millisecond // time passes, no renew
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
// exactly when their /leader bodies, without expiresInMs, and their
// ValidUntil are equal.
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
		}
		if rng.IntN(2) == 0 {
			s.IsLeader = true
			s.Token = 1 + rng.Int64N(3)
			s.ValidUntil = time.Unix(1000+rng.Int64N(3), 0)
			s.ExpiresIn = time.Duration(1+rng.Int64N(5000)) * time.Millisecond
		}
		r := newLeaderResponse(&s)
		r.ExpiresInMs = 0
		key := string(r.appendJSON(nil)) + " " + s.ValidUntil.String()
		tag := leaderETag(&s)
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
	if n := testing.AllocsPerRun(100, func() { _ = leaderETag(&s) }); n > 1 {
		t.Fatalf("leaderETag: %v allocations, want at most 1 (the string)", n)
	}
}
