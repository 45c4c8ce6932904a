package localapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/util/wait"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
)

// TestMain fails the package if any test leaves a goroutine behind: a
// stream or long-poll whose client went away must end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitFor bounds every wait on a condition (never a sleep).
const waitFor = 20 * time.Second

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, waitFor, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

var t0 = time.Unix(1_800_000_000, 0)

// serve runs h behind a real HTTP server with NewServer's timeouts (adjust
// may change them) and returns its URL and a client whose idle connections
// are closed at the end.
func serve(t *testing.T, h http.Handler, adjust ...func(*http.Server)) (string, *http.Client) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	cfg := NewServer("", h)
	srv.Config.ReadHeaderTimeout, srv.Config.ReadTimeout = cfg.ReadHeaderTimeout, cfg.ReadTimeout
	srv.Config.WriteTimeout, srv.Config.IdleTimeout = cfg.WriteTimeout, cfg.IdleTimeout
	for _, a := range adjust {
		a(srv.Config)
	}
	srv.Start()
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() {
		client.CloseIdleConnections()
		srv.Close()
	})
	return srv.URL, client
}

// sseEvent is one server-sent event, or a comment (Comment set).
type sseEvent struct {
	ID, Event, Data, Comment string
}

// stream is a /watch client that reads lines in the background.
type stream struct {
	t      *testing.T
	resp   *http.Response
	lines  chan string
	cancel context.CancelFunc
}

func openWatch(t *testing.T, client *http.Client, url string, hdr map[string]string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"/watch", nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET /watch: %v", err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		cancel()
		t.Fatalf("GET /watch: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	s := &stream{t: t, resp: resp, lines: make(chan string, 4096), cancel: cancel}
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
	}()
	t.Cleanup(s.close)
	return s
}

// close hangs up and waits for the reader to finish.
func (s *stream) close() {
	s.cancel()
	_ = s.resp.Body.Close()
	for range s.lines {
	}
}

// next returns the next event or comment, waiting for it.
func (s *stream) next() sseEvent {
	s.t.Helper()
	var ev sseEvent
	timeout := time.NewTimer(waitFor)
	defer timeout.Stop()
	for {
		select {
		case line, ok := <-s.lines:
			if !ok {
				s.t.Fatalf("stream ended while waiting for an event (got so far %+v)", ev)
			}
			switch {
			case line == "":
				if ev != (sseEvent{}) {
					return ev
				}
			case strings.HasPrefix(line, ":"):
				ev.Comment = strings.TrimSpace(line[1:])
			case strings.HasPrefix(line, "id: "):
				ev.ID = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.Event = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.Data = line[6:]
			default:
				s.t.Fatalf("unexpected line %q", line)
			}
		case <-timeout.C:
			s.t.Fatalf("no event within %v", waitFor)
		}
	}
}

// nextLeader returns the next leader event, skipping heartbeats.
func (s *stream) nextLeader() (sseEvent, LeaderResponse) {
	s.t.Helper()
	for {
		ev := s.next()
		if ev.Comment == "heartbeat" {
			continue
		}
		if ev.Event != "leader" || ev.ID == "" {
			s.t.Fatalf("not a leader event: %+v", ev)
		}
		var r LeaderResponse
		if err := json.Unmarshal([]byte(ev.Data), &r); err != nil {
			s.t.Fatalf("event data is not a LeaderResponse: %v: %s", err, ev.Data)
		}
		return ev, r
	}
}

// leaderNow is GET /leader's ETag and body (without the newline).
func leaderNow(t *testing.T, h http.Handler) (string, string) {
	t.Helper()
	rec := getLeader(h, "")
	return rec.Header().Get("ETag"), strings.TrimSuffix(rec.Body.String(), "\n")
}

func withHolder(s election.Status, holder string) election.Status {
	s.Holder = holder
	return s
}

func TestWatchSendsTheCurrentStateAtOnceThenEveryChange(t *testing.T) {
	el := &fakeElector{status: following, alive: true}
	h := NewHandler(el, nil, WithClock(testingclock.NewFakeClock(t0)))
	url, client := serve(t, h)
	s := openWatch(t, client, url, nil)

	tag, body := leaderNow(t, h)
	ev := s.next()
	if ev != (sseEvent{ID: tag, Event: "leader", Data: body}) {
		t.Fatalf("first event %+v, want id %s data %s", ev, tag, body)
	}
	if s.resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("Cache-Control %q", s.resp.Header.Get("Cache-Control"))
	}
	for i, st := range []election.Status{nobody, withHolder(following, "pod-c"), leading, unsafe, withdrawn} {
		// A notification with no change sends nothing: the next event is the
		// change that follows it.
		el.fire()
		el.set(st)
		tag, body := leaderNow(t, h)
		ev := s.next()
		if ev.ID != tag || ev.Event != "leader" || ev.Data != body {
			t.Fatalf("change %d: event %+v, want id %s data %s", i, ev, tag, body)
		}
	}
}

func TestWatchShowsLeadershipChangesInTheData(t *testing.T) {
	var healthy atomic.Bool
	el := &fakeElector{status: following, alive: true}
	h := NewHandler(el, nil, WithClock(testingclock.NewFakeClock(t0)), WithAppHealth(healthy.Load))
	url, client := serve(t, h)
	s := openWatch(t, client, url, nil)
	if _, r := s.nextLeader(); r.IsLeader || r.Holder != "pod-a" || !r.Candidate || r.AppHealthy == nil || *r.AppHealthy {
		t.Fatalf("first: %+v", r)
	}
	healthy.Store(true)
	el.set(leading)
	if _, r := s.nextLeader(); !r.IsLeader || r.Token != 7 || r.ExpiresInMs != 2500 || !*r.AppHealthy {
		t.Fatalf("leading: %+v", r)
	}
	healthy.Store(false)
	el.set(withdrawn)
	if _, r := s.nextLeader(); r.IsLeader || r.Candidate || r.NotCandidate != withdrawn.NotCandidate || *r.AppHealthy {
		t.Fatalf("withdrawn: %+v", r)
	}
}

func TestWatchResumesFromLastEventID(t *testing.T) {
	el := &fakeElector{status: following, alive: true}
	clk := testingclock.NewFakeClock(t0)
	h := NewHandler(el, nil, WithClock(clk), WithHeartbeat(time.Second))
	url, client := serve(t, h)
	tag, _ := leaderNow(t, h)

	// The client has seen the current state: the first thing it gets is
	// the heartbeat, not an event.
	s := openWatch(t, client, url, map[string]string{"Last-Event-ID": tag})
	eventually(t, "the stream's heartbeat ticker", clk.HasWaiters)
	clk.Step(time.Second)
	if ev := s.next(); ev != (sseEvent{Comment: "heartbeat"}) {
		t.Fatalf("resumed with the current ETag: got %+v before the heartbeat", ev)
	}
	el.set(nobody)
	newTag, body := leaderNow(t, h)
	if ev, _ := s.nextLeader(); ev.ID != newTag || ev.Data != body {
		t.Fatalf("after a change: %+v", ev)
	}
	s.close()

	// A client that saw an older state gets the current one at once.
	old := openWatch(t, client, url, map[string]string{"Last-Event-ID": tag})
	if ev, _ := old.nextLeader(); ev.ID != newTag || ev.Data != body {
		t.Fatalf("resumed with an old ETag: %+v, want id %s", ev, newTag)
	}
}

func TestWatchSendsAHeartbeatEveryInterval(t *testing.T) {
	el := &fakeElector{status: following, alive: true}
	clk := testingclock.NewFakeClock(t0)
	h := NewHandler(el, nil, WithClock(clk), WithHeartbeat(15*time.Second))
	url, client := serve(t, h)
	s := openWatch(t, client, url, nil)
	s.nextLeader()
	eventually(t, "the stream's heartbeat ticker", clk.HasWaiters)
	for i := 0; i < 3; i++ {
		clk.Step(15 * time.Second)
		if ev := s.next(); ev != (sseEvent{Comment: "heartbeat"}) {
			t.Fatalf("heartbeat %d: %+v", i, ev)
		}
	}
	// Events still flow between heartbeats.
	el.set(nobody)
	if _, r := s.nextLeader(); r.Holder != "" {
		t.Fatalf("after the heartbeats: %+v", r)
	}
}

// expiringElector serves a leader's status until its fake clock reaches
// until, with no notification: only the test's fire() at that instant
// announces it, as election's Changed does when the token runs out.
type expiringElector struct {
	*fakeElector
	clk   *testingclock.FakeClock
	until time.Time
}

func (e *expiringElector) Status() election.Status {
	s := e.fakeElector.Status()
	if left := e.until.Sub(e.clk.Now()); left > 0 {
		s.IsLeader, s.Token, s.ExpiresIn, s.ValidUntil = true, 7, left, e.until
	} else {
		s.IsLeader, s.Token, s.ExpiresIn, s.ValidUntil = false, 0, 0, time.Time{}
	}
	return s
}

func TestWatchSaysNotLeaderWhenChangedFiresAsTheTokenRunsOut(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	el := &expiringElector{fakeElector: &fakeElector{status: unsafe, alive: true}, clk: clk, until: t0.Add(2 * time.Second)}
	h := NewHandler(el, nil, WithClock(testingclock.NewFakeClock(t0)))
	url, client := serve(t, h)
	s := openWatch(t, client, url, nil)
	if _, r := s.nextLeader(); !r.IsLeader || r.Token != 7 {
		t.Fatalf("first: %+v", r)
	}
	clk.Step(2 * time.Second)
	el.fire()
	if _, r := s.nextLeader(); r.IsLeader || r.Token != 0 || r.Holder != "pod-a" {
		t.Fatalf("after the token ran out: %+v", r)
	}
}

func TestWatchAndLongPollRejectBadRequests(t *testing.T) {
	tests := []struct {
		method, target string
		ifNoneMatch    string
		wantCode       int
		wantError      string // substring
	}{
		{"GET", "/watch?x=1", "", 400, `unknown query parameter "x" on /watch; it takes none`},
		{"GET", "/watch?%zz", "", 400, "malformed query"},
		{"POST", "/watch", "", 405, "method POST not allowed on /watch"},
		{"GET", "/leader?wait=abc", `"x"`, 400, `query parameter wait: "abc" is not a duration`},
		{"GET", "/leader?wait=30", `"x"`, 400, `query parameter wait: "30" is not a duration`},
		{"GET", "/leader?wait=", `"x"`, 400, "query parameter wait: empty"},
		{"GET", "/leader?wait=-1s", `"x"`, 400, "query parameter wait: -1s: must not be negative"},
		{"GET", "/leader?wait=5m1s", `"x"`, 400, "query parameter wait: 5m1s: must be at most 5m0s"},
		{"GET", "/leader?wait=1h", "", 400, "must be at most 5m0s"},
		{"GET", "/leader?wait=1s&wait=2s", `"x"`, 400, "query parameter wait: given 2 times"},
		{"GET", "/leader?timeout=30s", "", 400, `unknown query parameter "timeout" on /leader; allowed: wait`},
		{"GET", "/leader?wait=1s&x", "", 400, `unknown query parameter "x"`},
		{"GET", "/leader?%zz", "", 400, "malformed query"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.target, func(t *testing.T) {
			el := &fakeElector{status: following, alive: true}
			h := NewHandler(el, nil)
			req := httptest.NewRequest(tt.method, tt.target, nil)
			if tt.ifNoneMatch != "" {
				req.Header.Set("If-None-Match", tt.ifNoneMatch)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.wantCode {
				t.Fatalf("code %d, want %d: %s", rec.Code, tt.wantCode, rec.Body)
			}
			var e ErrorResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || rec.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("not a JSON error (%v): %s", err, rec.Body)
			}
			if !strings.Contains(e.Error, tt.wantError) {
				t.Fatalf("error %q does not contain %q", e.Error, tt.wantError)
			}
		})
	}
}

func TestHeadWatchAnswersWithoutStreaming(t *testing.T) {
	el := &fakeElector{status: following, alive: true}
	rec := httptest.NewRecorder()
	NewHandler(el, nil).ServeHTTP(rec, httptest.NewRequest("HEAD", "/watch", nil))
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/event-stream" || rec.Body.Len() != 0 {
		t.Fatalf("HEAD /watch: %d %q %q", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
}

// longPoll sends GET /leader?wait= in the background; the answer arrives
// on the returned channel.
type pollAnswer struct {
	code int
	etag string
	body string
	err  error
}

func longPoll(ctx context.Context, client *http.Client, url, wait, ifNoneMatch string) <-chan pollAnswer {
	out := make(chan pollAnswer, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", url+"/leader?wait="+wait, nil)
		if ifNoneMatch != "" {
			req.Header.Set("If-None-Match", ifNoneMatch)
		}
		resp, err := client.Do(req)
		if err != nil {
			out <- pollAnswer{err: err}
			return
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		out <- pollAnswer{code: resp.StatusCode, etag: resp.Header.Get("ETag"), body: string(b), err: err}
	}()
	return out
}

func answer(t *testing.T, ch <-chan pollAnswer) pollAnswer {
	t.Helper()
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatalf("long-poll: %v", a.err)
		}
		return a
	case <-time.After(waitFor):
		t.Fatal("the long-poll did not answer")
		return pollAnswer{}
	}
}

// changedCalls counts the handler's reads of Changed.
type countingElector struct {
	*fakeElector
	calls atomic.Int64
}

func (c *countingElector) Changed() <-chan struct{} {
	c.calls.Add(1)
	return c.fakeElector.Changed()
}

func TestLongPollAnswersAtOnceWithoutAMatchingETag(t *testing.T) {
	el := &fakeElector{status: following, alive: true}
	h := NewHandler(el, nil, WithClock(testingclock.NewFakeClock(t0)))
	url, client := serve(t, h)
	tag, body := leaderNow(t, h)
	for name, inm := range map[string]string{"no If-None-Match": "", "an old ETag": `"old"`} {
		a := answer(t, longPoll(context.Background(), client, url, "5m", inm))
		if a.code != 200 || a.etag != tag || a.body != body+"\n" {
			t.Fatalf("%s: %d %s %s", name, a.code, a.etag, a.body)
		}
	}
	// wait=0s with the current ETag: an ordinary conditional GET.
	if a := answer(t, longPoll(context.Background(), client, url, "0s", tag)); a.code != 304 || a.etag != tag {
		t.Fatalf("wait=0s: %d %s", a.code, a.etag)
	}
}

func TestLongPollReturnsWhenTheETagChanges(t *testing.T) {
	el := &countingElector{fakeElector: &fakeElector{status: following, alive: true}}
	h := NewHandler(el, nil, WithClock(testingclock.NewFakeClock(t0)))
	url, client := serve(t, h)
	tag, _ := leaderNow(t, h)
	ch := longPoll(context.Background(), client, url, "5m", tag)
	eventually(t, "the long-poll waits", func() bool { return h.waiters.Load() == 1 })
	// A notification with nothing changed keeps it waiting.
	before := el.calls.Load()
	el.fire()
	eventually(t, "the long-poll looked again", func() bool { return el.calls.Load() > before })
	if h.waiters.Load() != 1 {
		t.Fatal("the long-poll stopped waiting on a notification with no change")
	}
	el.set(leading)
	a := answer(t, ch)
	newTag, body := leaderNow(t, h)
	if a.code != 200 || a.etag != newTag || a.body != body+"\n" || newTag == tag {
		t.Fatalf("after a change: %d %s %s (want %s %s)", a.code, a.etag, a.body, newTag, body)
	}
	eventually(t, "the slot is free", func() bool { return h.waiters.Load() == 0 })
}

func TestLongPollAnswersNotModifiedWhenTheWaitEnds(t *testing.T) {
	el := &fakeElector{status: following, alive: true}
	clk := testingclock.NewFakeClock(t0)
	h := NewHandler(el, nil, WithClock(clk))
	url, client := serve(t, h)
	tag, _ := leaderNow(t, h)
	ch := longPoll(context.Background(), client, url, "30s", tag)
	eventually(t, "the long-poll's timer", clk.HasWaiters)
	clk.Step(29 * time.Second)
	if h.waiters.Load() != 1 {
		t.Fatal("the long-poll ended before its wait")
	}
	clk.Step(time.Second)
	if a := answer(t, ch); a.code != 304 || a.etag != tag || a.body != "" {
		t.Fatalf("at the end of the wait: %d %s %q", a.code, a.etag, a.body)
	}
}

func TestLongPollEndsWhenTheClientGoesAway(t *testing.T) {
	el := &fakeElector{status: following, alive: true}
	h := NewHandler(el, nil, WithClock(testingclock.NewFakeClock(t0)))
	url, client := serve(t, h)
	tag, _ := leaderNow(t, h)
	ctx, cancel := context.WithCancel(context.Background())
	ch := longPoll(ctx, client, url, "5m", tag)
	eventually(t, "the long-poll waits", func() bool { return h.waiters.Load() == 1 })
	cancel()
	if a := <-ch; a.err == nil {
		t.Fatalf("canceled long-poll answered %d", a.code)
	}
	eventually(t, "the handler returns", func() bool { return h.waiters.Load() == 0 })
}

func TestWatchEndsWhenTheClientGoesAway(t *testing.T) {
	el := &fakeElector{status: following, alive: true}
	h := NewHandler(el, nil, WithClock(testingclock.NewFakeClock(t0)))
	url, client := serve(t, h)
	s := openWatch(t, client, url, nil)
	s.nextLeader()
	if h.waiters.Load() != 1 {
		t.Fatalf("waiters %d", h.waiters.Load())
	}
	s.close()
	eventually(t, "the stream handler returns", func() bool { return h.waiters.Load() == 0 })
}

func TestWatchersAndLongPollsBeyondTheLimitGet503(t *testing.T) {
	el := &fakeElector{status: following, alive: true}
	h := NewHandler(el, nil, WithClock(testingclock.NewFakeClock(t0)), WithMaxWaiters(2))
	url, client := serve(t, h)
	tag, _ := leaderNow(t, h)
	a := openWatch(t, client, url, nil)
	a.nextLeader()
	poll := longPoll(context.Background(), client, url, "5m", tag)
	eventually(t, "two waiters", func() bool { return h.waiters.Load() == 2 })

	check503 := func(what string, resp *http.Response, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		defer func() { _ = resp.Body.Close() }()
		var e ErrorResponse
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || json.NewDecoder(resp.Body).Decode(&e) != nil ||
			!strings.Contains(e.Error, "too many watchers and long-polls (2 at most)") {
			t.Fatalf("%s beyond the limit: %d Retry-After %q %+v", what, resp.StatusCode, resp.Header.Get("Retry-After"), e)
		}
	}
	resp, err := client.Get(url + "/watch")
	check503("a third watcher", resp, err)
	req, _ := http.NewRequest("GET", url+"/leader?wait=1m", nil)
	req.Header.Set("If-None-Match", tag)
	resp, err = client.Do(req)
	check503("a long-poll", resp, err)
	// Answers that do not wait are not limited.
	if rec := getLeader(h, ""); rec.Code != 200 {
		t.Fatalf("plain GET /leader at the limit: %d", rec.Code)
	}
	if resp, err := client.Get(url + "/leader?wait=1m"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a long-poll that need not wait: %v %v", resp, err)
	} else {
		_ = resp.Body.Close()
	}
	// A slot frees when a waiter ends.
	el.set(nobody)
	if a := answer(t, poll); a.code != 200 {
		t.Fatalf("long-poll: %d", a.code)
	}
	eventually(t, "one waiter", func() bool { return h.waiters.Load() == 1 })
	b := openWatch(t, client, url, nil)
	if _, r := b.nextLeader(); r.Holder != "" {
		t.Fatalf("new watcher: %+v", r)
	}
}

// TestSlowWatcherNeverBlocksTheLoopOrOtherWatchers: a client that opens
// /watch and never reads. The notifier (the election loop's side: close a
// channel) goes on at once, another watcher sees every state up to the
// last, and the stuck stream is dropped when a write times out.
func TestSlowWatcherNeverBlocksTheLoopOrOtherWatchers(t *testing.T) {
	el := &fakeElector{status: following, alive: true}
	h := NewHandler(el, nil, WithClock(testingclock.NewFakeClock(t0)), WithStreamWriteTimeout(300*time.Millisecond))
	url, client := serve(t, h)

	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if _, err := fmt.Fprintf(conn, "GET /watch HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the silent client's stream", func() bool { return h.waiters.Load() == 1 })
	good := openWatch(t, client, url, nil)
	good.nextLeader()

	big := strings.Repeat("h", 256<<10) // every event carries 256 KiB
	var last int
	for i := 1; h.waiters.Load() == 2; i++ {
		if i > 5000 {
			t.Fatal("the silent client's stream was never dropped")
		}
		start := time.Now()
		el.set(withHolder(following, fmt.Sprintf("%s-%d", big, i)))
		if d := time.Since(start); d > time.Second {
			t.Fatalf("publishing change %d took %v", i, d)
		}
		last = i
		// The good watcher keeps up: it sees this change (or a later one).
		for {
			_, r := good.nextLeader()
			if strings.HasSuffix(r.Holder, fmt.Sprintf("-%d", i)) {
				break
			}
		}
	}
	// The good watcher is still served.
	el.set(nobody)
	if _, r := good.nextLeader(); r.Holder != "" {
		t.Fatalf("after %d changes the good watcher got %+v", last, r)
	}
	eventually(t, "only the good watcher left", func() bool { return h.waiters.Load() == 1 })
}

// TestStreamsOutliveTheServerTimeouts: the server's read and write timeouts
// (NewServer's, here shortened) do not end a stream or a long-poll.
func TestStreamsOutliveTheServerTimeouts(t *testing.T) {
	el := &fakeElector{status: following, alive: true}
	h := NewHandler(el, nil, WithHeartbeat(50*time.Millisecond))
	url, client := serve(t, h, func(s *http.Server) {
		s.ReadTimeout, s.WriteTimeout, s.ReadHeaderTimeout = 100*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond
	})
	s := openWatch(t, client, url, nil)
	s.nextLeader()
	start := time.Now()
	for n := 0; n < 10 || time.Since(start) < 500*time.Millisecond; n++ {
		if ev := s.next(); ev.Comment != "heartbeat" {
			t.Fatalf("%+v", ev)
		}
	}
	el.set(nobody)
	if _, r := s.nextLeader(); r.Holder != "" {
		t.Fatalf("after %v: %+v", time.Since(start), r)
	}
	tag, _ := leaderNow(t, h)
	start = time.Now()
	a := answer(t, longPoll(context.Background(), client, url, "400ms", tag))
	if a.code != 304 || time.Since(start) < 400*time.Millisecond {
		t.Fatalf("long-poll past the write timeout: %d after %v", a.code, time.Since(start))
	}
}

func TestReleaseFor(t *testing.T) {
	tests := []struct {
		target    string
		wantCode  int
		wantFor   []time.Duration // nil: Release (no time out)
		wantError string
	}{
		{target: "/release", wantCode: 204},
		{target: "/release?for=5m", wantCode: 204, wantFor: []time.Duration{5 * time.Minute}},
		{target: "/release?for=1h30m", wantCode: 204, wantFor: []time.Duration{90 * time.Minute}},
		{target: "/release?for=24h", wantCode: 204, wantFor: []time.Duration{24 * time.Hour}},
		{target: "/release?for=1ns", wantCode: 204, wantFor: []time.Duration{1}},
		{target: "/release?for=24h0m1s", wantCode: 400, wantError: "query parameter for: 24h0m1s: must be at most 24h0m0s"},
		{target: "/release?for=0s", wantCode: 400, wantError: "query parameter for: 0s: must be greater than 0"},
		{target: "/release?for=-5m", wantCode: 400, wantError: "must be greater than 0"},
		{target: "/release?for=5", wantCode: 400, wantError: `query parameter for: "5" is not a duration`},
		{target: "/release?for=soon", wantCode: 400, wantError: `"soon" is not a duration`},
		{target: "/release?for=", wantCode: 400, wantError: "query parameter for: empty"},
		{target: "/release?for=1m&for=2m", wantCode: 400, wantError: "query parameter for: given 2 times"},
		{target: "/release?duration=5m", wantCode: 400, wantError: `unknown query parameter "duration" on /release; allowed: for`},
		{target: "/release?%zz", wantCode: 400, wantError: "malformed query"},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			el := &fakeElector{status: leading, alive: true}
			rec := httptest.NewRecorder()
			NewHandler(el, nil).ServeHTTP(rec, httptest.NewRequest("POST", tt.target, nil))
			if rec.Code != tt.wantCode {
				t.Fatalf("code %d, want %d: %s", rec.Code, tt.wantCode, rec.Body)
			}
			if tt.wantCode != 204 {
				var e ErrorResponse
				if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || !strings.Contains(e.Error, tt.wantError) {
					t.Fatalf("error %q (%v), want it to contain %q", e.Error, err, tt.wantError)
				}
				if el.released != 0 {
					t.Fatal("a bad request released")
				}
				return
			}
			if el.released != 1 || fmt.Sprint(el.releaseFor) != fmt.Sprint(tt.wantFor) {
				t.Fatalf("released %d times, ReleaseFor %v, want %v", el.released, el.releaseFor, tt.wantFor)
			}
		})
	}
}
