package localapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
)

// fakeElector is the API's view of an election. Tests that run handlers
// concurrently change its status with set, which fires Changed as the
// election loop does; the others assign status directly.
type fakeElector struct {
	mu         sync.Mutex
	status     election.Status
	alive      bool
	releaseErr error
	released   int
	releaseFor []time.Duration // the d of every ReleaseFor call
	changed    chan struct{}
}

func (f *fakeElector) Status() election.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status
}
func (f *fakeElector) Alive() bool { return f.alive }
func (f *fakeElector) Release(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released++
	return f.releaseErr
}
func (f *fakeElector) ReleaseFor(_ context.Context, d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released++
	f.releaseFor = append(f.releaseFor, d)
	return f.releaseErr
}

func (f *fakeElector) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.changed == nil {
		f.changed = make(chan struct{})
	}
	return f.changed
}

// set publishes s and fires Changed, as the election loop does.
func (f *fakeElector) set(s election.Status) {
	f.mu.Lock()
	f.status = s
	f.mu.Unlock()
	f.fire()
}

// fire closes the Changed channel with no change of Status (the election
// may fire spuriously, or a token may have just run out).
func (f *fakeElector) fire() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.changed != nil {
		close(f.changed)
	}
	f.changed = make(chan struct{})
}

var (
	leading = election.Status{Lease: "ns/l", Identity: "pod-a", Ready: true, Holder: "pod-a", HoldsLease: true,
		LeaseTransitions: 7, LeaseUID: "uid-1", IsLeader: true, Token: 7, ExpiresIn: 2500 * time.Millisecond,
		ValidUntil: time.Unix(1000, 2500*int64(time.Millisecond)), LastToken: 7, Candidate: true}
	following = election.Status{Lease: "ns/l", Identity: "pod-b", Ready: true, Holder: "pod-a", LeaseTransitions: 7, LeaseUID: "uid-1", Candidate: true}
	nobody    = election.Status{Lease: "ns/l", Identity: "pod-b", Ready: true, LeaseTransitions: 7, LeaseUID: "uid-1", Candidate: true}
	unsafe    = election.Status{Lease: "ns/l", Identity: "pod-a", Ready: true, Holder: "pod-a", HoldsLease: true, LeaseTransitions: 7, LastToken: 7, Candidate: true}
	notReady  = election.Status{Lease: "ns/l", Identity: "pod-a", Candidate: true}
	withdrawn = election.Status{Lease: "ns/l", Identity: "pod-b", Ready: true, Holder: "pod-a", LeaseTransitions: 7, LeaseUID: "uid-1", NotCandidate: "app unhealthy: connection refused"}
	timedOut  = election.Status{Lease: "ns/l", Identity: "pod-a", Ready: true, LeaseTransitions: 7, LeaseUID: "uid-1", LastToken: 7, NotCandidate: "released for 4m59s"}
)

func TestEndpoints(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "elector_is_leader 1\n") })
	tests := []struct {
		name       string
		status     election.Status
		alive      bool
		releaseErr error
		method     string
		path       string
		accept     string
		wantCode   int
		wantType   string
		wantBody   map[string]any // JSON fields that must match
		wantText   string
		wantAllow  string
	}{
		{name: "leader", status: leading, alive: true, method: "GET", path: "/leader", wantCode: 200,
			wantBody: map[string]any{"isLeader": true, "holder": "pod-a", "identity": "pod-a", "lease": "ns/l", "leaseTransitions": 7.0, "token": 7.0, "expiresInMs": 2500.0}},
		{name: "leader as follower has no token", status: following, alive: true, method: "GET", path: "/leader", wantCode: 200,
			wantBody: map[string]any{"isLeader": false, "holder": "pod-a", "identity": "pod-b", "token": nil, "expiresInMs": nil}},
		{name: "token", status: leading, alive: true, method: "GET", path: "/token", wantCode: 200,
			wantBody: map[string]any{"token": 7.0, "lease": "ns/l", "leaseUID": "uid-1", "expiresInMs": 2500.0}},
		{name: "token as text", status: leading, alive: true, method: "GET", path: "/token", accept: "text/plain", wantCode: 200, wantType: "text/plain; charset=utf-8", wantText: "7"},
		{name: "token json preferred", status: leading, alive: true, method: "GET", path: "/token", accept: "application/json, text/plain", wantCode: 200, wantBody: map[string]any{"token": 7.0}},
		{name: "token as follower", status: following, alive: true, method: "GET", path: "/token", wantCode: 409,
			wantBody: map[string]any{"error": "not the leader", "holder": "pod-a"}},
		{name: "token as text follower stays json", status: following, alive: true, method: "GET", path: "/token", accept: "text/plain", wantCode: 409,
			wantBody: map[string]any{"holder": "pod-a"}},
		{name: "token with nobody leading", status: nobody, alive: true, method: "GET", path: "/token", wantCode: 409,
			wantBody: map[string]any{"error": "not the leader: nobody holds the lease", "holder": ""}},
		{name: "token while holding but unsafe", status: unsafe, alive: true, method: "GET", path: "/token", wantCode: 503,
			wantBody: map[string]any{"error": "this pod holds the lease but cannot prove its term is still safe"}},
		{name: "token before the lease is observed", status: notReady, alive: true, method: "GET", path: "/token", wantCode: 503},
		{name: "release", status: leading, alive: true, method: "POST", path: "/release", wantCode: 204},
		{name: "release write fails", status: leading, alive: true, releaseErr: errors.New("boom"), method: "POST", path: "/release", wantCode: 502,
			wantBody: map[string]any{"error": "stepped down, but writing the lease free failed: boom"}},
		{name: "healthz", alive: true, method: "GET", path: "/healthz", wantCode: 200, wantBody: map[string]any{"status": "ok"}},
		{name: "healthz loop dead", method: "GET", path: "/healthz", wantCode: 503},
		{name: "readyz", status: following, alive: true, method: "GET", path: "/readyz", wantCode: 200},
		{name: "readyz not observed", status: notReady, alive: true, method: "GET", path: "/readyz", wantCode: 503},
		{name: "metrics", alive: true, method: "GET", path: "/metrics", wantCode: 200, wantText: "elector_is_leader 1\n"},
		{name: "head leader", status: leading, alive: true, method: "HEAD", path: "/leader", wantCode: 200},
		{name: "post leader", status: leading, alive: true, method: "POST", path: "/leader", wantCode: 405, wantAllow: "GET, HEAD",
			wantBody: map[string]any{"error": "method POST not allowed on /leader; use GET"}},
		{name: "get release", status: leading, alive: true, method: "GET", path: "/release", wantCode: 405, wantAllow: "POST"},
		{name: "delete token", status: leading, alive: true, method: "DELETE", path: "/token", wantCode: 405},
		{name: "unknown path", alive: true, method: "GET", path: "/nope", wantCode: 404, wantBody: map[string]any{"error": "no such endpoint: /nope"}},
		{name: "trailing slash is unknown", alive: true, method: "GET", path: "/token/", wantCode: 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			el := &fakeElector{status: tt.status, alive: tt.alive, releaseErr: tt.releaseErr}
			h := NewHandler(el, metrics)
			req := httptest.NewRequest(tt.method, tt.path, nil)
			if tt.accept != "" {
				req.Header.Set("Accept", tt.accept)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.wantCode {
				t.Fatalf("code %d, want %d; body %s", rec.Code, tt.wantCode, rec.Body)
			}
			if tt.wantAllow != "" && rec.Header().Get("Allow") != tt.wantAllow {
				t.Fatalf("Allow %q, want %q", rec.Header().Get("Allow"), tt.wantAllow)
			}
			if tt.wantType != "" && rec.Header().Get("Content-Type") != tt.wantType {
				t.Fatalf("Content-Type %q, want %q", rec.Header().Get("Content-Type"), tt.wantType)
			}
			if tt.wantText != "" && rec.Body.String() != tt.wantText {
				t.Fatalf("body %q, want %q", rec.Body, tt.wantText)
			}
			if rec.Code >= 400 || tt.wantBody != nil {
				if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
					t.Fatalf("Content-Type %q, want application/json", ct)
				}
				var got map[string]any
				if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
					t.Fatalf("body is not JSON: %v: %s", err, rec.Body)
				}
				if rec.Code >= 400 {
					if msg, _ := got["error"].(string); msg == "" {
						t.Fatalf("error response without an error message: %s", rec.Body)
					}
				}
				for k, want := range tt.wantBody {
					v, present := got[k]
					if want == nil {
						if present {
							t.Fatalf("field %q present (%v), want absent", k, v)
						}
						continue
					}
					if v != want {
						t.Fatalf("field %q = %#v, want %#v (body %s)", k, v, want, rec.Body)
					}
				}
			}
			if tt.path == "/release" && tt.method == "POST" && el.released != 1 {
				t.Fatalf("Release called %d times", el.released)
			}
		})
	}
}

func TestLeaderETag(t *testing.T) {
	el := &fakeElector{status: leading, alive: true}
	h := NewHandler(el, nil)
	get := func(ifNoneMatch string) *httptest.ResponseRecorder { return getLeader(h, ifNoneMatch) }
	first := get("").Header().Get("ETag")
	if first == "" {
		t.Fatal("no ETag")
	}
	// Time passing (expiresInMs) does not change it.
	el.status.ExpiresIn = time.Second
	if got := get("").Header().Get("ETag"); got != first {
		t.Fatalf("ETag changed without a leadership change: %s -> %s", first, got)
	}
	if rec := get(first); rec.Code != http.StatusNotModified || rec.Body.Len() != 0 {
		t.Fatalf("If-None-Match: code %d body %q, want 304 and no body", rec.Code, rec.Body)
	}
	// All states of one pod (identity pod-a).
	seen := map[string]string{first: "leading token 7"}
	for name, s := range map[string]election.Status{
		"leading token 8": func() election.Status { s := leading; s.Token, s.LeaseTransitions = 8, 8; return s }(),
		"following":       {Lease: "ns/l", Identity: "pod-a", Ready: true, Holder: "pod-b", LeaseTransitions: 8},
		"nobody":          {Lease: "ns/l", Identity: "pod-a", Ready: true, LeaseTransitions: 8},
		"unsafe":          unsafe,
	} {
		el.status = s
		tag := get("").Header().Get("ETag")
		if prev, dup := seen[tag]; dup {
			t.Fatalf("%s and %s share ETag %s", name, prev, tag)
		}
		seen[tag] = name
		if rec := get(first); rec.Code != http.StatusOK {
			t.Fatalf("%s: stale If-None-Match answered %d", name, rec.Code)
		}
	}
}

func TestMetricsOnly(t *testing.T) {
	h := MetricsOnly(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "m") }))
	for path, want := range map[string]int{"/metrics": 200, "/token": 404, "/leader": 404, "/release": 404} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != want {
			t.Fatalf("%s: %d, want %d", path, rec.Code, want)
		}
	}
}

func TestServerHasTimeouts(t *testing.T) {
	s := NewServer("127.0.0.1:0", NewHandler(&fakeElector{}, nil))
	if s.ReadHeaderTimeout == 0 || s.ReadTimeout == 0 || s.WriteTimeout == 0 || s.IdleTimeout == 0 || s.MaxHeaderBytes == 0 {
		t.Fatalf("server without timeouts: %+v", s)
	}
	if !strings.HasPrefix(s.Addr, "127.0.0.1") {
		t.Fatal(s.Addr)
	}
}
