package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/elector-sidecar/elector-sidecar/pkg/client"
	"github.com/elector-sidecar/elector-sidecar/pkg/election"
	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	"github.com/elector-sidecar/elector-sidecar/pkg/localapi"
)

// TestMain fails the package if a test leaves a goroutine behind (a Watch
// that outlives its context, a stream never closed).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeElector is the local API's view of an election, as in pkg/localapi's
// tests: set publishes a status and fires Changed as the election loop
// does; Release steps down (no holder, no token) the same way.
type fakeElector struct {
	mu         sync.Mutex
	status     election.Status
	releaseErr error
	released   int
	releaseFor []time.Duration
	changed    chan struct{}
}

func (f *fakeElector) Status() election.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status
}

func (f *fakeElector) Alive() bool { return true }

func (f *fakeElector) Release(ctx context.Context) error { return f.ReleaseFor(ctx, 0) }

func (f *fakeElector) ReleaseFor(_ context.Context, d time.Duration) error {
	f.mu.Lock()
	f.released++
	if d > 0 {
		f.releaseFor = append(f.releaseFor, d)
	}
	err := f.releaseErr
	s := f.status
	f.mu.Unlock()
	if err == nil && s.HoldsLease {
		s.IsLeader, s.HoldsLease, s.Holder, s.Token, s.ExpiresIn, s.ValidUntil = false, false, "", 0, 0, time.Time{}
		f.set(s)
	}
	return err
}

func (f *fakeElector) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.changed == nil {
		f.changed = make(chan struct{})
	}
	return f.changed
}

// set publishes s and fires Changed.
func (f *fakeElector) set(s election.Status) {
	f.mu.Lock()
	f.status = s
	f.mu.Unlock()
	f.fire()
}

// fire closes the Changed channel with no change of Status.
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
		ValidUntil: time.Unix(1000, 0), LastToken: 7, Candidate: true}
	following = election.Status{Lease: "ns/l", Identity: "pod-a", Ready: true, Holder: "pod-b", LeaseTransitions: 8, LeaseUID: "uid-1", Candidate: true}
	nobody    = election.Status{Lease: "ns/l", Identity: "pod-a", Ready: true, LeaseTransitions: 8, LeaseUID: "uid-1", Candidate: true}
	unsafe    = election.Status{Lease: "ns/l", Identity: "pod-a", Ready: true, Holder: "pod-a", HoldsLease: true, LeaseTransitions: 7, LastToken: 7, Candidate: true}
	notReady  = election.Status{Lease: "ns/l", Identity: "pod-a", Candidate: true}
)

// sidecar serves the real local API for el, with every request recorded,
// and a hook (nil: none) that may answer a request itself (true) instead.
type sidecar struct {
	*httptest.Server
	el  *fakeElector
	api http.Handler
	ln  *trackedListener

	mu       sync.Mutex
	requests []*http.Request
	hook     func(n int, w http.ResponseWriter, r *http.Request) bool // n: the request's number on its path, from 1
}

func startSidecar(t testing.TB, s election.Status, opts ...localapi.Option) *sidecar {
	el := &fakeElector{status: s}
	sc := &sidecar{el: el, api: localapi.NewHandler(el, nil, opts...)}
	sc.Server = httptest.NewUnstartedServer(sc)
	sc.ln = &trackedListener{Listener: sc.Listener, conns: map[net.Conn]struct{}{}}
	sc.Listener = sc.ln
	sc.Start()
	if t != nil {
		t.Cleanup(func() { sc.Close(); sc.dropConnections() })
	}
	return sc
}

// dropConnections closes every connection the sidecar has open: the
// sidecar drops its streams (httptest's CloseClientConnections does not see
// a /watch stream, whose connection the local API takes over from net/http).
func (sc *sidecar) dropConnections() { sc.ln.closeAll() }

// trackedListener keeps every connection it accepted, to close them all.
type trackedListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func (l *trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.conns[c] = struct{}{}
	return c, nil
}

func (l *trackedListener) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.conns {
		_ = c.Close()
		delete(l.conns, c)
	}
}

func (sc *sidecar) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sc.mu.Lock()
	sc.requests = append(sc.requests, r.Clone(context.Background()))
	n := 0
	for _, q := range sc.requests {
		if q.URL.Path == r.URL.Path {
			n++
		}
	}
	hook := sc.hook
	sc.mu.Unlock()
	if hook != nil && hook(n, w, r) {
		return
	}
	sc.api.ServeHTTP(w, r)
}

func (sc *sidecar) setHook(h func(n int, w http.ResponseWriter, r *http.Request) bool) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.hook = h
}

// requestsTo returns the requests made so far to path.
func (sc *sidecar) requestsTo(path string) []*http.Request {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	var out []*http.Request
	for _, r := range sc.requests {
		if r.URL.Path == path {
			out = append(out, r)
		}
	}
	return out
}

// etag is the ETag GET /leader answers now.
func (sc *sidecar) etag(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(sc.URL + "/leader")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Header.Get("ETag")
}

// fastBackoff keeps the tests' reconnections quick.
var fastBackoff = client.Backoff{Duration: time.Millisecond, Factor: 2, Cap: 20 * time.Millisecond}

func newClient(t *testing.T, url string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(url, append([]client.Option{client.WithBackoff(fastBackoff), client.WithTimeout(10 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNewAcceptsHTTPURLsAndRejectsTheRest(t *testing.T) {
	for _, tt := range []struct {
		in, want, wantErr string
	}{
		{in: "", want: "http://127.0.0.1:4040"},
		{in: "http://127.0.0.1:4040/", want: "http://127.0.0.1:4040"},
		{in: "https://localhost:8443", want: "https://localhost:8443"},
		{in: "127.0.0.1:4040", wantErr: `sidecar URL "127.0.0.1:4040": want a URL like http://127.0.0.1:4040`},
		{in: "ftp://127.0.0.1:4040", wantErr: "want a URL like"},
		{in: "http://", wantErr: "want a URL like"},
		{in: "http://127.0.0.1:4040/?x=1", wantErr: "want a URL like"},
	} {
		t.Run(tt.in, func(t *testing.T) {
			c, err := client.New(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New(%q) = %v, want an error containing %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.URL() != tt.want {
				t.Fatalf("URL %q, want %q", c.URL(), tt.want)
			}
		})
	}
}

func TestLeaderReturnsTheSidecarsState(t *testing.T) {
	for _, tt := range []struct {
		name string
		s    election.Status
		want localapi.LeaderResponse
	}{
		{"leading", leading, localapi.LeaderResponse{IsLeader: true, Holder: "pod-a", Identity: "pod-a", Lease: "ns/l",
			LeaseTransitions: 7, Ready: true, Candidate: true, Token: 7, ExpiresInMs: 2500}},
		{"following", following, localapi.LeaderResponse{Holder: "pod-b", Identity: "pod-a", Lease: "ns/l",
			LeaseTransitions: 8, Ready: true, Candidate: true}},
		{"not ready", notReady, localapi.LeaderResponse{Identity: "pod-a", Lease: "ns/l", Candidate: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sc := startSidecar(t, tt.s)
			got, err := newClient(t, sc.URL).Leader(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("Leader() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestTokenAgainstTheSidecar(t *testing.T) {
	for _, tt := range []struct {
		name       string
		s          election.Status
		wantErr    error // nil: a token
		wantCode   int
		wantHolder string
		wantMsg    string
	}{
		{name: "leading gives the token", s: leading},
		{name: "another pod leads: ErrNotLeader", s: following, wantErr: client.ErrNotLeader, wantCode: 409, wantHolder: "pod-b", wantMsg: "not the leader"},
		{name: "nobody leads: ErrNotLeader", s: nobody, wantErr: client.ErrNotLeader, wantCode: 409, wantMsg: "not the leader: nobody holds the lease"},
		{name: "lease not observed yet: ErrUnavailable", s: notReady, wantErr: client.ErrUnavailable, wantCode: 503, wantMsg: "the lease has not been observed yet"},
		{name: "term not provably safe: ErrUnavailable", s: unsafe, wantErr: client.ErrUnavailable, wantCode: 503, wantMsg: "cannot prove its term is still safe"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sc := startSidecar(t, tt.s)
			before := time.Now()
			tok, err := newClient(t, sc.URL).Token(context.Background())
			if tt.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				want := localapi.TokenResponse{Token: 7, Lease: "ns/l", LeaseUID: "uid-1", ExpiresInMs: 2500}
				if tok.TokenResponse != want {
					t.Fatalf("Token() = %+v, want %+v", tok.TokenResponse, want)
				}
				if tok.Fencing() != (fencing.Token{Value: 7, LeaseUID: "uid-1"}) {
					t.Fatalf("Fencing() = %+v", tok.Fencing())
				}
				if d := tok.Deadline.Sub(before); d < 2500*time.Millisecond || d > 2500*time.Millisecond+time.Since(before) {
					t.Fatalf("Deadline is %v after the call started, want 2.5s from when the request was sent", d)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Token() error %v, want one matching %v", err, tt.wantErr)
			}
			var se *client.StatusError
			if !errors.As(err, &se) {
				t.Fatalf("error %T is not a *client.StatusError", err)
			}
			if se.StatusCode != tt.wantCode || se.Holder != tt.wantHolder || !strings.Contains(se.Message, tt.wantMsg) || se.Path != "/token" {
				t.Fatalf("StatusError %+v, want code %d holder %q message containing %q", se, tt.wantCode, tt.wantHolder, tt.wantMsg)
			}
			for _, other := range []error{client.ErrNotLeader, client.ErrUnavailable} {
				if other != tt.wantErr && errors.Is(err, other) {
					t.Fatalf("error %v also matches %v", err, other)
				}
			}
		})
	}
}

// TestErrorShapes: answers the real sidecar does not give (or gives only on
// other paths) are clear errors, never a zero token.
func TestErrorShapes(t *testing.T) {
	type call func(c *client.Client) error
	token := func(c *client.Client) error { _, err := c.Token(context.Background()); return err }
	leader := func(c *client.Client) error { _, err := c.Leader(context.Background()); return err }
	release := func(c *client.Client) error { return c.Release(context.Background(), 0) }
	for _, tt := range []struct {
		name    string
		code    int
		body    string
		call    call
		wantErr string
		is      error // nil: matches neither ErrNotLeader nor ErrUnavailable
	}{
		{"token: malformed JSON", 200, `{"token": 7,`, token, `GET /token: the 200 answer is not the expected JSON`, nil},
		{"token: 200 without a token", 200, `{"lease":"ns/l"}`, token, `GET /token: 200 without a token`, nil},
		{"token: plain-text 409", 409, "not the leader\n", token, `GET /token: 409 Conflict: not the leader`, client.ErrNotLeader},
		{"token: 503 with JSON", 503, `{"error":"election loop is not running"}`, token, `GET /token: 503 Service Unavailable: election loop is not running`, client.ErrUnavailable},
		{"token: 502 from a proxy", 502, "<html>bad gateway</html>", token, `GET /token: 502 Bad Gateway: <html>bad gateway</html>`, nil},
		{"leader: malformed JSON", 200, `not json`, leader, `GET /leader: the 200 answer is not the expected JSON`, nil},
		{"leader: 409 is not ErrNotLeader", 409, `{"error":"conflict"}`, leader, `GET /leader: 409 Conflict: conflict`, nil},
		{"leader: 503", 503, `{"error":"too many"}`, leader, `GET /leader: 503 Service Unavailable: too many`, client.ErrUnavailable},
		{"release: 504", 504, `{"error":"release taken but not confirmed in time"}`, release, `POST /release: 504 Gateway Timeout: release taken but not confirmed in time`, nil},
		{"release: 404 of an old sidecar", 404, `{"error":"no such endpoint: /release"}`, release, `POST /release: 404 Not Found: no such endpoint: /release`, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.code)
				_, _ = io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			err := tt.call(newClient(t, srv.URL))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
			for _, sentinel := range []error{client.ErrNotLeader, client.ErrUnavailable} {
				if errors.Is(err, sentinel) != (sentinel == tt.is) {
					t.Fatalf("errors.Is(%v, %v) = %v", err, sentinel, errors.Is(err, sentinel))
				}
			}
		})
	}
}

func TestTokenWhenTheSidecarIsDown(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	_, err := newClient(t, url).Token(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), "GET /token: ") || errors.Is(err, client.ErrNotLeader) {
		t.Fatalf("error %v, want a GET /token connection error", err)
	}
}

func TestRelease(t *testing.T) {
	for _, tt := range []struct {
		name       string
		d          time.Duration
		releaseErr error
		wantErr    string
		is         error
		wantCalls  int
		wantFor    []time.Duration
	}{
		{name: "release", d: 0, wantCalls: 1},
		{name: "release for 5m", d: 5 * time.Minute, wantCalls: 1, wantFor: []time.Duration{5 * time.Minute}},
		{name: "release for 1.5s", d: 1500 * time.Millisecond, wantCalls: 1, wantFor: []time.Duration{1500 * time.Millisecond}},
		{name: "negative is refused before asking", d: -time.Second, wantErr: "release for -1s: must not be negative"},
		{name: "over the sidecar's limit is refused before asking", d: 25 * time.Hour, wantErr: "release for 25h0m0s: must be at most 24h0m0s"},
		{name: "election not running: ErrUnavailable", releaseErr: election.ErrNotRunning, wantCalls: 1,
			wantErr: "POST /release: 503 Service Unavailable: election loop is not running", is: client.ErrUnavailable},
		{name: "unconfirmed: 504", releaseErr: election.ErrReleaseUnconfirmed, wantCalls: 1,
			wantErr: "POST /release: 504 Gateway Timeout: release taken but not confirmed in time"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sc := startSidecar(t, leading)
			sc.el.releaseErr = tt.releaseErr
			err := newClient(t, sc.URL).Release(context.Background(), tt.d)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatal(err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			case tt.is != nil && !errors.Is(err, tt.is):
				t.Fatalf("error %v does not match %v", err, tt.is)
			}
			sc.el.mu.Lock()
			defer sc.el.mu.Unlock()
			if sc.el.released != tt.wantCalls || fmt.Sprint(sc.el.releaseFor) != fmt.Sprint(tt.wantFor) {
				t.Fatalf("the sidecar released %d times, for %v; want %d, for %v", sc.el.released, sc.el.releaseFor, tt.wantCalls, tt.wantFor)
			}
		})
	}
}

// watchRun is a Watch running in the background, its states and errors.
type watchRun struct {
	states chan localapi.LeaderResponse
	mu     sync.Mutex
	errs   []error
}

// startWatch runs c.Watch until the test ends; it checks that Watch then
// returns context.Canceled. The client gets the error handler.
func startWatch(t *testing.T, url string, opts ...client.Option) *watchRun {
	t.Helper()
	wr := &watchRun{states: make(chan localapi.LeaderResponse, 64)}
	opts = append(opts, client.WithErrorHandler(func(err error) {
		wr.mu.Lock()
		defer wr.mu.Unlock()
		wr.errs = append(wr.errs, err)
	}))
	c := newClient(t, url, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.Watch(ctx, func(s localapi.LeaderResponse) { wr.states <- s })
	}()
	t.Cleanup(func() { // before the sidecar's Close: Cleanups run last-in first
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Watch returned %v, want context.Canceled", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Watch did not return after its context was cancelled")
		}
	})
	return wr
}

// next waits for the next state given to fn and checks it.
func (wr *watchRun) next(t *testing.T, wantLeader bool, wantHolder string) localapi.LeaderResponse {
	t.Helper()
	select {
	case s := <-wr.states:
		if s.IsLeader != wantLeader || s.Holder != wantHolder {
			t.Fatalf("Watch gave isLeader=%v holder=%q, want isLeader=%v holder=%q", s.IsLeader, s.Holder, wantLeader, wantHolder)
		}
		return s
	case <-time.After(10 * time.Second):
		t.Fatalf("Watch gave no state within 10s (want isLeader=%v holder=%q); errors: %v", wantLeader, wantHolder, wr.errors())
	}
	return localapi.LeaderResponse{}
}

// none checks that fn got no state beyond those taken with next.
func (wr *watchRun) none(t *testing.T) {
	t.Helper()
	select {
	case s := <-wr.states:
		t.Fatalf("Watch gave an unexpected (repeated) state %+v", s)
	default:
	}
}

func (wr *watchRun) errors() []error {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	return append([]error(nil), wr.errs...)
}

// waitError waits until the error handler got an error containing substr.
func (wr *watchRun) waitError(t *testing.T, substr string) {
	t.Helper()
	waitFor(t, "an error containing "+substr, func() bool {
		for _, err := range wr.errors() {
			if strings.Contains(err.Error(), substr) {
				return true
			}
		}
		return false
	})
}

// waitFor polls cond until it is true, for at most 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 2*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("%s: not within 10s", what)
	}
}

func TestWatchSeesEveryChange(t *testing.T) {
	sc := startSidecar(t, following)
	wr := startWatch(t, sc.URL)
	wr.next(t, false, "pod-b")
	for _, step := range []struct {
		s      election.Status
		leader bool
		holder string
	}{
		{nobody, false, ""},
		{leading, true, "pod-a"},
		{following, false, "pod-b"},
		{leading, true, "pod-a"},
	} {
		sc.el.fire() // a wake-up without a change gives fn nothing
		sc.el.set(step.s)
		got := wr.next(t, step.leader, step.holder)
		if step.leader && got.Token != 7 {
			t.Fatalf("leading state without its token: %+v", got)
		}
	}
	wr.none(t)
	if n := len(sc.requestsTo("/watch")); n != 1 {
		t.Fatalf("%d /watch connections, want 1 (errors: %v)", n, wr.errors())
	}
}

func TestWatchReconnectsWithLastEventIDAfterTheStreamDrops(t *testing.T) {
	sc := startSidecar(t, leading)
	wr := startWatch(t, sc.URL)
	wr.next(t, true, "pod-a")
	etag := sc.etag(t)

	sc.dropConnections() // the sidecar drops the stream
	waitFor(t, "a second /watch", func() bool { return len(sc.requestsTo("/watch")) >= 2 })
	reqs := sc.requestsTo("/watch")
	if got := reqs[1].Header.Get("Last-Event-ID"); got != etag {
		t.Fatalf("reconnected with Last-Event-ID %q, want the last state's ETag %q", got, etag)
	}
	if got := reqs[0].Header.Get("Last-Event-ID"); got != "" {
		t.Fatalf("first connection sent Last-Event-ID %q", got)
	}
	wr.waitError(t, "GET /watch")

	sc.el.set(following) // seen on the new stream, and only that: no repeat of the state before the drop
	wr.next(t, false, "pod-b")
	wr.none(t)
}

// TestWatchRecoversFromStreamFaults: each fault on the first /watch is
// reported, then Watch reconnects (after a backoff) and follows the real
// stream.
func TestWatchRecoversFromStreamFaults(t *testing.T) {
	for _, tt := range []struct {
		name    string
		first   func(w http.ResponseWriter, r *http.Request)
		opts    []client.Option
		wantErr string
	}{
		{
			name: "too many watchers (503)",
			first: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(503)
				_, _ = io.WriteString(w, `{"error":"too many watchers and long-polls (1 at most); retry later"}`)
			},
			wantErr: "GET /watch: 503 Service Unavailable: too many watchers",
		},
		{
			name: "malformed event data",
			first: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, "id: \"x\"\nevent: leader\ndata: {\"isLeader\":\n\n")
			},
			wantErr: "GET /watch: the event's data is not the expected JSON",
		},
		{
			name: "not an event stream",
			first: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, "{}")
			},
			wantErr: `GET /watch: the answer is "application/json", not an event stream`,
		},
		{
			name: "the stream ends",
			first: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, ": heartbeat\n\n")
			},
			wantErr: "GET /watch: the sidecar ended the stream",
		},
		{
			name: "a silent stream",
			first: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(200)
				w.(http.Flusher).Flush()
				<-r.Context().Done() // no event, no heartbeat
			},
			opts:    []client.Option{client.WithIdleTimeout(200 * time.Millisecond)},
			wantErr: "GET /watch: nothing (no event, no heartbeat) for 200ms",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sc := startSidecar(t, leading, localapi.WithHeartbeat(10*time.Millisecond))
			sc.setHook(func(n int, w http.ResponseWriter, r *http.Request) bool {
				if r.URL.Path == "/watch" && n == 1 {
					tt.first(w, r)
					return true
				}
				return false
			})
			wr := startWatch(t, sc.URL, tt.opts...)
			wr.next(t, true, "pod-a")
			wr.waitError(t, tt.wantErr)
			if got := sc.requestsTo("/watch")[1].Header.Get("Last-Event-ID"); got != "" {
				t.Fatalf("reconnected with Last-Event-ID %q after a fault before any state", got)
			}
			sc.el.set(following)
			wr.next(t, false, "pod-b")
			wr.none(t)
		})
	}
}

func TestWatchLongPollsASidecarWithoutWatch(t *testing.T) {
	sc := startSidecar(t, following)
	sc.setHook(func(_ int, w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/watch" {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(404)
		_, _ = io.WriteString(w, `{"error":"no such endpoint: /watch"}`)
		return true
	})
	wr := startWatch(t, sc.URL, client.WithLongPollWait(time.Minute))
	wr.next(t, false, "pod-b")
	wr.waitError(t, client.ErrNoWatch.Error())
	var noWatch bool
	for _, err := range wr.errors() {
		noWatch = noWatch || errors.Is(err, client.ErrNoWatch)
	}
	if !noWatch {
		t.Fatalf("no error matching ErrNoWatch in %v", wr.errors())
	}
	etag := sc.etag(t)
	waitFor(t, "a long-poll on the state's ETag", func() bool {
		for _, r := range sc.requestsTo("/leader") {
			if r.URL.Query().Get("wait") == "1m0s" && r.Header.Get("If-None-Match") == etag {
				return true
			}
		}
		return false
	})
	sc.el.set(leading)
	wr.next(t, true, "pod-a")
	sc.el.set(nobody)
	wr.next(t, false, "")
	wr.none(t)
	if n := len(sc.requestsTo("/watch")); n != 1 {
		t.Fatalf("%d /watch requests, want 1 (then long-polls only)", n)
	}
}

func TestWatchPollsASidecarWithoutWatchOrLongPoll(t *testing.T) {
	sc := startSidecar(t, following)
	sc.setHook(func(_ int, w http.ResponseWriter, r *http.Request) bool {
		switch {
		case r.URL.Path == "/watch":
			w.WriteHeader(404)
			_, _ = io.WriteString(w, `{"error":"no such endpoint: /watch"}`)
		case r.URL.Path == "/leader" && r.URL.RawQuery != "":
			w.WriteHeader(400)
			_, _ = io.WriteString(w, `{"error":"unknown query parameter \"wait\" on /leader; it takes none"}`)
		default:
			return false
		}
		return true
	})
	wr := startWatch(t, sc.URL, client.WithPollInterval(5*time.Millisecond))
	wr.next(t, false, "pod-b")
	wr.waitError(t, "the sidecar has no GET /leader long-poll")
	sc.el.set(leading)
	wr.next(t, true, "pod-a")
	n := len(sc.requestsTo("/leader"))
	waitFor(t, "three more polls", func() bool { return len(sc.requestsTo("/leader")) >= n+3 })
	wr.none(t) // unchanged state, unchanged ETag: fn is not called again
	sc.el.set(nobody)
	wr.next(t, false, "")
}

// TestWatchPollsASidecarWithoutETags: a sidecar that sends no ETag is
// polled, and fn is called when the state changes, not when only the
// validity counts down.
func TestWatchPollsASidecarWithoutETags(t *testing.T) {
	var mu sync.Mutex
	holder, left := "pod-a", int64(3000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/leader" || r.URL.RawQuery != "" {
			w.WriteHeader(404)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		left--
		fmt.Fprintf(w, `{"isLeader":%v,"holder":%q,"identity":"pod-a","lease":"ns/l","ready":true,"candidate":true,"appHealthy":true,"expiresInMs":%d}`,
			holder == "pod-a", holder, left)
	}))
	defer srv.Close()
	wr := startWatch(t, srv.URL, client.WithPollInterval(time.Millisecond))
	wr.next(t, true, "pod-a")
	wr.waitError(t, "GET /leader sends no ETag")
	mu.Lock()
	n := left
	mu.Unlock()
	waitFor(t, "three more polls", func() bool { mu.Lock(); defer mu.Unlock(); return left <= n-3 })
	wr.none(t)
	mu.Lock()
	holder = "pod-b"
	mu.Unlock()
	wr.next(t, false, "pod-b")
}

// TestWithHTTPClientIsUsed: the client's requests go through the given
// http.Client.
func TestWithHTTPClientIsUsed(t *testing.T) {
	sc := startSidecar(t, leading)
	var seen sync.Map
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		seen.Store(r.Method+" "+r.URL.Path, true)
		return http.DefaultTransport.RoundTrip(r)
	})}
	c := newClient(t, sc.URL, client.WithHTTPClient(hc))
	if _, err := c.Token(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := seen.Load("GET /token"); !ok {
		t.Fatal("GET /token did not go through the given http.Client")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestWatchRejectsANilFunc(t *testing.T) {
	c := newClient(t, "")
	if err := c.Watch(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "fn is nil") {
		t.Fatalf("Watch(nil) = %v", err)
	}
}
