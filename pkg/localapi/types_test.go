package localapi

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"testing/quick"
	"time"
	"unicode/utf8"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
)

// stdJSON is what encoding/json writes for v (HTML-escaped, with the
// newline the handlers also end their bodies with).
func stdJSON(t testing.TB, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type appender interface{ AppendJSON([]byte) []byte }

// checkRoundTrip: the hand-written encoder writes v byte for byte as
// encoding/json does, and decoding that gives v back.
func checkRoundTrip[T any, P interface {
	*T
	appender
}](t testing.TB, v T) bool {
	t.Helper()
	got := append(P(&v).AppendJSON(nil), '\n')
	want := stdJSON(t, v)
	if !bytes.Equal(got, want) {
		t.Errorf("%T %+v:\n got %s\nwant %s", v, v, got, want)
		return false
	}
	var back T
	if err := json.Unmarshal(got, &back); err != nil {
		t.Errorf("%T: decode %s: %v", v, got, err)
		return false
	}
	if utf8Valid(v) && !reflect.DeepEqual(back, v) {
		t.Errorf("%T: %+v came back as %+v", v, v, back)
		return false
	}
	return true
}

// utf8Valid: every string field of v is valid UTF-8 (invalid bytes become
// U+FFFD on the wire, in encoding/json too, so those do not come back).
func utf8Valid(v any) bool {
	rv := reflect.ValueOf(v)
	for i := 0; i < rv.NumField(); i++ {
		if f := rv.Field(i); f.Kind() == reflect.String && !utf8.ValidString(f.String()) {
			return false
		}
	}
	return true
}

var awkward = []string{
	"", "pod-a", `quo"te`, `back\slash`, "tab\tnew\nline\r", "nul\x00", "\x1f\x7f", "ünïcødé", "日本語", "emoji 🗳️",
	"<script>&amp;</script>", "a&b", "a<b", "x>y", "\u2028\u2029", "invalid \xff\xfe utf8", "\xc3", "  spaces  ",
	strings.Repeat("long-holder-", 40),
}

// TestEncodersMatchEncodingJSON: for many statuses (leader, follower, not
// ready, awkward holders, zero values) the bodies the handlers write are
// exactly encoding/json's encoding of the response types.
func TestEncodersMatchEncodingJSON(t *testing.T) {
	var statuses []election.Status
	for _, base := range []election.Status{leading, following, nobody, unsafe, notReady, withdrawn, timedOut, {}} {
		statuses = append(statuses, base)
		for _, s := range awkward {
			st := base
			st.Holder, st.Identity, st.Lease, st.LeaseUID = s, s+"-id", "ns/"+s, s
			if !st.Candidate {
				st.NotCandidate = "app unhealthy: " + s
			}
			statuses = append(statuses, st)
		}
	}
	edge := leading
	edge.ExpiresIn = 300 * time.Microsecond // the last millisecond of a term
	statuses = append(statuses, edge)
	big := leading
	big.Token, big.LeaseTransitions, big.ExpiresIn = 1<<62, 1<<62, 1<<62
	statuses = append(statuses, big)
	neg := following
	neg.LeaseTransitions = -1 << 63
	statuses = append(statuses, neg)
	stuck := following
	stuck.CannotLead = "leaseTransitions is 2147483647, the largest fencing token"
	stuck.IdentityCollision = "another process with identity \"pod-a\" wrote the lease"
	statuses = append(statuses, stuck)

	for i, s := range statuses {
		el := &fakeElector{status: s, alive: true}
		// Every third handler has no app health source; the others say
		// healthy or unhealthy.
		var app *bool
		var opts []Option
		if i%3 != 0 {
			healthy := i%3 == 1
			app = &healthy
			opts = append(opts, WithAppHealth(func() bool { return healthy }))
		}
		h := NewHandler(el, nil, opts...)
		for _, path := range []string{"/leader", "/token", "/healthz", "/readyz"} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
			var want []byte
			switch {
			case path == "/leader":
				want = stdJSON(t, leaderWant(s, app))
			case path == "/token" && rec.Code == 200:
				want = stdJSON(t, TokenResponse{Token: s.Token, Lease: s.Lease, LeaseUID: s.LeaseUID, ExpiresInMs: s.ExpiresIn.Milliseconds()})
			case path == "/token" && rec.Code == 409:
				msg := "not the leader"
				if s.Holder == "" {
					msg += ": nobody holds the lease"
				}
				want = stdJSON(t, NotLeaderResponse{Error: msg, Holder: s.Holder})
			case rec.Code >= 400:
				var e ErrorResponse
				if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" {
					t.Fatalf("%s %+v: %d %s is not an ErrorResponse", path, s, rec.Code, rec.Body)
				}
				want = stdJSON(t, e)
			case path == "/healthz":
				want = stdJSON(t, HealthResponse{Status: "ok"})
			case path == "/readyz":
				want = stdJSON(t, HealthResponse{Status: "ready"})
			}
			if got := rec.Body.Bytes(); !bytes.Equal(got, want) {
				t.Errorf("%s for %+v (code %d):\n got %s\nwant %s", path, s, rec.Code, got, want)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("%s: Content-Type %q", path, ct)
			}
		}
	}
}

// leaderWant is the /leader body for s and the app's health (nil: no
// source), spelled out from the README.
func leaderWant(s election.Status, app *bool) LeaderResponse {
	r := LeaderResponse{IsLeader: s.IsLeader, Holder: s.Holder, Identity: s.Identity, Lease: s.Lease,
		LeaseTransitions: s.LeaseTransitions, Ready: s.Ready, Candidate: s.Candidate, NotCandidate: s.NotCandidate, AppHealthy: app,
		CannotLead: s.CannotLead, IdentityCollision: s.IdentityCollision}
	if s.IsLeader {
		r.Token, r.ExpiresInMs = s.Token, s.ExpiresIn.Milliseconds()
	}
	return r
}

// TestEncodersRoundTripTable: the types themselves, including zero values.
func TestEncodersRoundTripTable(t *testing.T) {
	checkRoundTrip(t, LeaderResponse{})
	checkRoundTrip(t, TokenResponse{})
	checkRoundTrip(t, ErrorResponse{})
	checkRoundTrip(t, NotLeaderResponse{})
	checkRoundTrip(t, HealthResponse{})
	for _, s := range awkward {
		checkRoundTrip(t, LeaderResponse{IsLeader: true, Holder: s, Identity: s, Lease: s, LeaseTransitions: 3, Ready: true, Candidate: true, AppHealthy: &boolTrue, Token: 3, ExpiresInMs: 1})
		checkRoundTrip(t, LeaderResponse{Holder: s, LeaseTransitions: -1, NotCandidate: s, AppHealthy: &boolFalse, Token: -5})
		checkRoundTrip(t, LeaderResponse{Holder: s, CannotLead: s, IdentityCollision: s})
		checkRoundTrip(t, TokenResponse{Token: -1, Lease: s, LeaseUID: s, ExpiresInMs: -1 << 63})
		checkRoundTrip(t, ErrorResponse{Error: s})
		checkRoundTrip(t, NotLeaderResponse{Error: s, Holder: s})
		checkRoundTrip(t, HealthResponse{Status: s})
	}
}

// randString draws strings that hit every escaping path: printable ASCII,
// control bytes, the HTML characters, quotes, multi-byte runes, U+2028/9
// and invalid UTF-8.
func randString(r *rand.Rand) string {
	const pieces = "abcXYZ09-./_ "
	special := []string{`"`, `\`, "<", ">", "&", "\x00", "\n", "\t", "\x1f", "\x7f", "é", "日", "🗳", "\u2028", "\u2029", "\xff", "\xc3", "\ufffd"}
	n := r.IntN(24)
	var b strings.Builder
	for i := 0; i < n; i++ {
		if r.IntN(4) == 0 {
			b.WriteString(special[r.IntN(len(special))])
		} else {
			b.WriteByte(pieces[r.IntN(len(pieces))])
		}
	}
	return b.String()
}

// randBoolPtr is nil, true or false.
func randBoolPtr(r *rand.Rand) *bool {
	switch r.IntN(3) {
	case 0:
		return nil
	case 1:
		return &boolTrue
	default:
		return &boolFalse
	}
}

func randInt(r *rand.Rand) int64 {
	switch r.IntN(4) {
	case 0:
		return 0
	case 1:
		return r.Int64N(100)
	case 2:
		return -r.Int64N(1 << 40)
	default:
		return int64(r.Uint64())
	}
}

// TestEncodersRoundTripQuick: testing/quick over random values of every
// type (random runes anywhere in Unicode, random integers).
func TestEncodersRoundTripQuick(t *testing.T) {
	for _, f := range []any{
		func(v LeaderResponse) bool { return checkRoundTrip(t, v) },
		func(v TokenResponse) bool { return checkRoundTrip(t, v) },
		func(v ErrorResponse) bool { return checkRoundTrip(t, v) },
		func(v NotLeaderResponse) bool { return checkRoundTrip(t, v) },
		func(v HealthResponse) bool { return checkRoundTrip(t, v) },
	} {
		if err := quick.Check(f, &quick.Config{MaxCount: 2000}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEncodersRoundTripRandom: random values built from the characters
// that need escaping, which quick's uniform runes rarely draw.
func TestEncodersRoundTripRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for i := 0; i < 5000 && !t.Failed(); i++ {
		checkRoundTrip(t, LeaderResponse{IsLeader: r.IntN(2) == 0, Holder: randString(r), Identity: randString(r), Lease: randString(r),
			LeaseTransitions: randInt(r), Ready: r.IntN(2) == 0, Candidate: r.IntN(2) == 0, NotCandidate: randString(r),
			AppHealthy: randBoolPtr(r), Token: randInt(r), ExpiresInMs: randInt(r)})
		checkRoundTrip(t, TokenResponse{Token: randInt(r), Lease: randString(r), LeaseUID: randString(r), ExpiresInMs: randInt(r)})
		checkRoundTrip(t, ErrorResponse{Error: randString(r)})
		checkRoundTrip(t, NotLeaderResponse{Error: randString(r), Holder: randString(r)})
		checkRoundTrip(t, HealthResponse{Status: randString(r)})
	}
}

// FuzzEncoders: `go test -fuzz FuzzEncoders ./pkg/localapi` explores further;
// plain `go test` runs the seeds.
func FuzzEncoders(f *testing.F) {
	for i, s := range awkward {
		f.Add(s, s+"x", s, int64(len(s)), int64(-len(s)), true, uint8(i))
	}
	f.Fuzz(func(t *testing.T, a, b, c string, n, m int64, flag bool, app uint8) {
		var healthy *bool
		switch app % 3 {
		case 1:
			healthy = &boolTrue
		case 2:
			healthy = &boolFalse
		}
		checkRoundTrip(t, LeaderResponse{IsLeader: flag, Holder: a, Identity: b, Lease: a + b, LeaseTransitions: n, Ready: !flag,
			Candidate: c == "", NotCandidate: c, AppHealthy: healthy, Token: m, ExpiresInMs: n ^ m})
		checkRoundTrip(t, TokenResponse{Token: n, Lease: a, LeaseUID: b, ExpiresInMs: m})
		checkRoundTrip(t, ErrorResponse{Error: a})
		checkRoundTrip(t, NotLeaderResponse{Error: a, Holder: b})
		checkRoundTrip(t, HealthResponse{Status: b})
	})
}

// TestEncodersDoNotAllocate: with room in the buffer, the encoders allocate
// nothing for ASCII strings (the common case: pod names, namespaces).
func TestEncodersDoNotAllocate(t *testing.T) {
	buf := make([]byte, 0, 512)
	l := LeaderResponse{IsLeader: true, Holder: "billing-7d9c-abcde", Identity: "billing-7d9c-abcde", Lease: "team/billing", LeaseTransitions: 5, Ready: true,
		Candidate: true, NotCandidate: "released for 4m59s", AppHealthy: &boolTrue, Token: 5, ExpiresInMs: 14630}
	tok := TokenResponse{Token: 5, Lease: "team/billing", LeaseUID: "4f0c0000-1111-2222-3333-444455556666", ExpiresInMs: 14213}
	nl := NotLeaderResponse{Error: "not the leader", Holder: "billing-7d9c-abcde"}
	n := testing.AllocsPerRun(100, func() {
		buf = l.AppendJSON(buf[:0])
		buf = tok.AppendJSON(buf[:0])
		buf = nl.AppendJSON(buf[:0])
	})
	if n != 0 {
		t.Fatalf("%v allocations per run, want 0", n)
	}
}
