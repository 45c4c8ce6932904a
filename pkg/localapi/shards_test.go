package localapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/elector-sidecar/elector-sidecar/pkg/api"
	"github.com/elector-sidecar/elector-sidecar/pkg/shards"
)

// fakeShardSet is the API's view of a shard set. set publishes a status
// and fires Changed, as the set's loop does.
type fakeShardSet struct {
	mu         sync.Mutex
	status     shards.Status
	alive      bool
	releaseErr error
	released   []int
	changed    chan struct{}
}

func (f *fakeShardSet) Status() shards.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status
}

func (f *fakeShardSet) Peek() shards.Status { return f.Status() }

func (f *fakeShardSet) Alive() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.alive
}

func (f *fakeShardSet) Release(_ context.Context, i int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, i)
	return f.releaseErr
}

func (f *fakeShardSet) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.changed == nil {
		f.changed = make(chan struct{})
	}
	return f.changed
}

func (f *fakeShardSet) set(s shards.Status) {
	f.mu.Lock()
	f.status = s
	if f.changed != nil {
		close(f.changed)
	}
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

func (f *fakeShardSet) releases() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.released...)
}

// owning is a member of a 16-shard set holding shards 0, 5 and 11.
var owning = shards.Status{Set: "team/queue", Identity: "pod-a", Shards: 16, Ready: true, Live: true,
	Members: []string{"pod-a", "pod-b", "pod-c"},
	Owned: []shards.Owned{
		{Index: 0, Lease: "queue-0", LeaseUID: "uid-0", Token: 3, ExpiresIn: 2500 * time.Millisecond, ValidUntil: time.Unix(1000, 0)},
		{Index: 5, Lease: "queue-5", LeaseUID: "uid-5", Token: 9, ExpiresIn: 2400 * time.Millisecond, ValidUntil: time.Unix(1000, 0)},
		{Index: 11, Lease: "queue-11", LeaseUID: "uid-11", Token: 1, ExpiresIn: 1200 * time.Millisecond, ValidUntil: time.Unix(999, 0)},
	}}

// owningWant is owning's /shards body, spelled out.
var owningWant = api.ShardsResponse{Set: "team/queue", Identity: "pod-a", Shards: 16, Ready: true, Live: true,
	Members: []string{"pod-a", "pod-b", "pod-c"},
	Owned: []api.ShardToken{
		{Index: 0, Lease: "team/queue-0", LeaseUID: "uid-0", Token: 3, ExpiresInMs: 2500},
		{Index: 5, Lease: "team/queue-5", LeaseUID: "uid-5", Token: 9, ExpiresInMs: 2400},
		{Index: 11, Lease: "team/queue-11", LeaseUID: "uid-11", Token: 1, ExpiresInMs: 1200},
	}}

func shardsHandler(set *fakeShardSet, opts ...Option) *Handler {
	return NewHandler(nil, nil, append([]Option{WithShards(set)}, opts...)...)
}

func do(h http.Handler, method, target string, hdr ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestShardRoutesAnswerEveryCase: each shard route, in each state of the
// set, with its status code and body; every error is a JSON error.
func TestShardRoutesAnswerEveryCase(t *testing.T) {
	notReady := shards.Status{Set: "team/queue", Identity: "pod-a", Shards: 16}
	notLive := shards.Status{Set: "team/queue", Identity: "pod-a", Shards: 16, Ready: true}
	tests := []struct {
		name       string
		status     shards.Status
		dead       bool // the set's loop is not running
		releaseErr error
		method     string
		target     string
		accept     string
		wantCode   int
		wantBody   any    // the exact body (encoding/json of it), if set
		wantError  string // a part of the JSON error, if set
		wantText   string
		wantFreed  []int
	}{
		{name: "shards", status: owning, method: "GET", target: "/shards", wantCode: 200, wantBody: owningWant},
		{name: "shards of a member that is not ready", status: notReady, method: "GET", target: "/shards", wantCode: 200,
			wantBody: api.ShardsResponse{Set: "team/queue", Identity: "pod-a", Shards: 16, Members: []string{}, Owned: []api.ShardToken{}}},
		{name: "owned token", status: owning, method: "GET", target: "/shards/5/token", wantCode: 200, wantBody: owningWant.Owned[1]},
		{name: "owned token as text", status: owning, method: "GET", target: "/shards/11/token", accept: "text/plain", wantCode: 200, wantText: "1"},
		{name: "token not owned", status: owning, method: "GET", target: "/shards/4/token", wantCode: 409,
			wantBody: api.NotShardOwnerResponse{Error: "not the owner of shard 4", Index: 4}},
		{name: "token of a member whose session is not live", status: notLive, method: "GET", target: "/shards/0/token", wantCode: 409,
			wantBody: api.NotShardOwnerResponse{Error: "not the owner of shard 0: this member's session is not live", Index: 0}},
		{name: "token before the set is listed", status: notReady, method: "GET", target: "/shards/0/token", wantCode: 503, wantError: "not been listed yet"},
		{name: "token of an index past N", status: owning, method: "GET", target: "/shards/16/token", wantCode: 404, wantError: "no shard 16: the set has 16 shards, 0 … 15"},
		{name: "token of a malformed index", status: owning, method: "GET", target: "/shards/x/token", wantCode: 400, wantError: `"x" is not a shard index`},
		{name: "token of a negative index", status: owning, method: "GET", target: "/shards/-1/token", wantCode: 400, wantError: "not a shard index"},
		{name: "token of a padded index", status: owning, method: "GET", target: "/shards/05/token", wantCode: 400, wantError: "not a shard index"},
		{name: "token of an empty index", status: owning, method: "GET", target: "/shards//token", wantCode: 400, wantError: "not a shard index"},
		{name: "token of an index too big for an int", status: owning, method: "GET", target: "/shards/99999999999999999999/token", wantCode: 400, wantError: "not a shard index"},
		{name: "token with a query", status: owning, method: "GET", target: "/shards/0/token?x=1", wantCode: 400, wantError: "unknown query parameter"},
		{name: "token by POST", status: owning, method: "POST", target: "/shards/0/token", wantCode: 405, wantError: "use GET"},
		{name: "a deeper path is not a route", status: owning, method: "GET", target: "/shards/0/1/token", wantCode: 404, wantError: "no such endpoint"},
		{name: "shards with a bad wait", status: owning, method: "GET", target: "/shards?wait=6m", wantCode: 400, wantError: "query parameter wait"},
		{name: "shards with an unknown parameter", status: owning, method: "GET", target: "/shards?shard=1", wantCode: 400, wantError: "unknown query parameter"},
		{name: "leader in shard mode", status: owning, method: "GET", target: "/leader", wantCode: 404, wantError: "use GET /shards"},
		{name: "token in shard mode", status: owning, method: "GET", target: "/token", wantCode: 404, wantError: "runs a shard set"},
		{name: "release a shard", status: owning, method: "POST", target: "/release?shard=5", wantCode: 204, wantFreed: []int{5}},
		{name: "release a shard not held", status: owning, releaseErr: shards.ErrNotHeld, method: "POST", target: "/release?shard=4", wantCode: 409,
			wantBody: api.NotShardOwnerResponse{Error: "not the owner of shard 4: nothing to release", Index: 4}, wantFreed: []int{4}},
		{name: "release a shard past N", status: owning, releaseErr: shards.ErrNoSuchShard, method: "POST", target: "/release?shard=16", wantCode: 404,
			wantError: "no shard 16", wantFreed: []int{16}},
		{name: "release that times out", status: owning, releaseErr: context.DeadlineExceeded, method: "POST", target: "/release?shard=0", wantCode: 504,
			wantError: "did not finish within 10s", wantFreed: []int{0}},
		{name: "release that fails", status: owning, releaseErr: errors.New("lease write failed"), method: "POST", target: "/release?shard=0", wantCode: 502,
			wantError: "lease write failed", wantFreed: []int{0}},
		{name: "release on a dead loop", status: owning, dead: true, method: "POST", target: "/release?shard=0", wantCode: 503, wantError: "nothing changed"},
		{name: "release without shard", status: owning, method: "POST", target: "/release", wantCode: 400, wantError: "POST /release?shard=<i>"},
		{name: "release with for", status: owning, method: "POST", target: "/release?shard=0&for=5m", wantCode: 400, wantError: "not supported by a shard set"},
		{name: "release of a malformed shard", status: owning, method: "POST", target: "/release?shard=a", wantCode: 400, wantError: "query parameter shard"},
		{name: "release with the shard twice", status: owning, method: "POST", target: "/release?shard=0&shard=1", wantCode: 400, wantError: "given 2 times"},
		{name: "healthz", status: owning, method: "GET", target: "/healthz", wantCode: 200, wantBody: HealthResponse{Status: "ok"}},
		{name: "healthz of a dead loop", status: owning, dead: true, method: "GET", target: "/healthz", wantCode: 503, wantError: "shard set loop is not running"},
		{name: "readyz", status: owning, method: "GET", target: "/readyz", wantCode: 200, wantBody: HealthResponse{Status: "ready"}},
		{name: "readyz before the set is listed", status: notReady, method: "GET", target: "/readyz", wantCode: 503, wantError: "not been listed yet"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			set := &fakeShardSet{status: tc.status, alive: !tc.dead, releaseErr: tc.releaseErr}
			rec := do(shardsHandler(set), tc.method, tc.target, "Accept", tc.accept)
			if rec.Code != tc.wantCode {
				t.Fatalf("%s %s: %d, want %d: %s", tc.method, tc.target, rec.Code, tc.wantCode, rec.Body)
			}
			switch {
			case tc.wantText != "":
				if rec.Body.String() != tc.wantText || rec.Header().Get("Content-Type") != "text/plain; charset=utf-8" {
					t.Fatalf("body %q (%s), want %q", rec.Body, rec.Header().Get("Content-Type"), tc.wantText)
				}
			case tc.wantBody != nil:
				if want := stdJSON(t, tc.wantBody); rec.Body.String() != string(want) {
					t.Fatalf("body\n%s\nwant\n%s", rec.Body, want)
				}
			case tc.wantCode == 204:
				if rec.Body.Len() != 0 {
					t.Fatalf("204 with a body: %s", rec.Body)
				}
			}
			if rec.Code >= 400 {
				var e ErrorResponse
				if rec.Header().Get("Content-Type") != "application/json" || json.Unmarshal(rec.Body.Bytes(), &e) != nil ||
					!strings.Contains(e.Error, tc.wantError) {
					t.Fatalf("error body %q (%s), want a JSON error with %q", rec.Body, rec.Header().Get("Content-Type"), tc.wantError)
				}
			}
			if got := set.releases(); !slices.Equal(got, tc.wantFreed) {
				t.Fatalf("released %v, want %v", got, tc.wantFreed)
			}
		})
	}
}

// TestWithoutShardsTheShardRoutesSayNotAShardSet: a single-Lease sidecar
// answers /shards and /shards/{i}/token with a 404 that says how to get a
// shard set; its /leader is as before.
func TestWithoutShardsTheShardRoutesSayNotAShardSet(t *testing.T) {
	h := NewHandler(&fakeElector{status: leading, alive: true}, nil)
	for _, target := range []string{"/shards", "/shards/0/token", "/shards?wait=1s", "/shards/x/token"} {
		rec := do(h, "GET", target)
		var e ErrorResponse
		if rec.Code != 404 || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Error != errNotShardSet {
			t.Fatalf("GET %s: %d %s, want 404 %q", target, rec.Code, rec.Body, errNotShardSet)
		}
	}
	if rec := do(h, "POST", "/release?shard=0"); rec.Code != 400 || !strings.Contains(rec.Body.String(), "unknown query parameter") {
		t.Fatalf("POST /release?shard=0 on a single Lease: %d %s", rec.Code, rec.Body)
	}
	if rec := do(h, "GET", "/leader"); rec.Code != 200 || rec.Body.String() != string(stdJSON(t, newLeaderResponse(&leading, appNone))) {
		t.Fatalf("GET /leader: %d %s", rec.Code, rec.Body)
	}
	if routes := h.Routes(); routes["/shards"] != "GET" || routes[shardTokenRoute] != "GET" {
		t.Fatalf("Routes() %v lacks the shard routes", routes)
	}
}

// TestShardsETagChangesWithTheOwnedSetNotTheCountdown: the ETag of GET
// /shards moves with every change of the body but expiresInMs counting
// down; a client holding it gets 304 until then.
func TestShardsETagChangesWithTheOwnedSetNotTheCountdown(t *testing.T) {
	set := &fakeShardSet{status: owning, alive: true}
	h := shardsHandler(set)
	tag := do(h, "GET", "/shards").Header().Get("ETag")
	if tag == "" {
		t.Fatal("GET /shards without an ETag")
	}
	if rec := do(h, "GET", "/shards", "If-None-Match", tag); rec.Code != 304 || rec.Body.Len() != 0 {
		t.Fatalf("GET /shards with its ETag: %d %s", rec.Code, rec.Body)
	}
	countdown := owning
	countdown.Owned = append([]shards.Owned(nil), owning.Owned...)
	countdown.Owned[0].ExpiresIn -= time.Second
	set.set(countdown)
	if got := do(h, "GET", "/shards").Header().Get("ETag"); got != tag {
		t.Fatalf("the ETag moved with the countdown: %s -> %s", tag, got)
	}
	change := func(name string, f func(*shards.Status)) {
		t.Helper()
		s := owning
		s.Members = append([]string(nil), owning.Members...)
		s.Owned = append([]shards.Owned(nil), owning.Owned...)
		f(&s)
		set.set(s)
		rec := do(h, "GET", "/shards", "If-None-Match", tag)
		if rec.Code != 200 || rec.Header().Get("ETag") == tag {
			t.Errorf("%s: %d with ETag %s (was %s), want 200 and a new ETag", name, rec.Code, rec.Header().Get("ETag"), tag)
		}
	}
	change("a shard lost", func(s *shards.Status) { s.Owned = s.Owned[:2] })
	change("a new token", func(s *shards.Status) { s.Owned[1].Token++ })
	change("a renewal", func(s *shards.Status) { s.Owned[2].ValidUntil = s.Owned[2].ValidUntil.Add(time.Second) })
	change("a recreated Lease", func(s *shards.Status) { s.Owned[0].LeaseUID = "uid-new" })
	change("a member gone", func(s *shards.Status) { s.Members = s.Members[:2] })
	change("not live", func(s *shards.Status) { s.Live = false })
	change("not ready", func(s *shards.Status) { s.Ready = false })
}

// pollShards sends GET /shards?wait= in the background.
func pollShards(ctx context.Context, client *http.Client, url, wait, ifNoneMatch string) <-chan pollAnswer {
	out := make(chan pollAnswer, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", url+"/shards?wait="+wait, nil)
		req.Header.Set("If-None-Match", ifNoneMatch)
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

// TestShardsLongPollWakesOnChange: GET /shards?wait= with the current ETag
// waits (in a waiter slot) until the owned set changes, answers 304 when
// the wait ends, and at once without a matching ETag.
func TestShardsLongPollWakesOnChange(t *testing.T) {
	set := &fakeShardSet{status: owning, alive: true}
	clk := testingclock.NewFakeClock(t0)
	h := shardsHandler(set, WithClock(clk))
	url, client := serve(t, h)
	tag := do(h, "GET", "/shards").Header().Get("ETag")
	if a := answer(t, pollShards(context.Background(), client, url, "5m", `"old"`)); a.code != 200 || a.etag != tag {
		t.Fatalf("an old ETag: %d %s", a.code, a.etag)
	}

	ch := pollShards(context.Background(), client, url, "5m", tag)
	eventually(t, "the long-poll waits", func() bool { return h.waiters.Load() == 1 })
	lost := owning
	lost.Owned = owning.Owned[1:]
	set.set(lost)
	a := answer(t, ch)
	var got api.ShardsResponse
	if a.code != 200 || a.etag == tag || json.Unmarshal([]byte(a.body), &got) != nil || len(got.Owned) != 2 || got.Owned[0].Index != 5 {
		t.Fatalf("after shard 0 was lost: %d %s %s", a.code, a.etag, a.body)
	}
	eventually(t, "the slot is free", func() bool { return h.waiters.Load() == 0 })

	ch = pollShards(context.Background(), client, url, "30s", a.etag)
	eventually(t, "the long-poll's timer", clk.HasWaiters)
	clk.Step(30 * time.Second)
	if b := answer(t, ch); b.code != 304 || b.etag != a.etag || b.body != "" {
		t.Fatalf("at the end of the wait: %d %s %q", b.code, b.etag, b.body)
	}
}

// TestShardsWaitersShareTheLimit: /watch streams and /shards long-polls
// of a shard set take the same waiter slots as /leader's.
func TestShardsWaitersShareTheLimit(t *testing.T) {
	set := &fakeShardSet{status: owning, alive: true}
	h := shardsHandler(set, WithClock(testingclock.NewFakeClock(t0)), WithMaxWaiters(2))
	url, client := serve(t, h)
	tag := do(h, "GET", "/shards").Header().Get("ETag")
	a := openWatch(t, client, url, nil)
	nextShards(t, a)
	poll := pollShards(context.Background(), client, url, "5m", tag)
	eventually(t, "two waiters", func() bool { return h.waiters.Load() == 2 })
	if b := answer(t, pollShards(context.Background(), client, url, "5m", tag)); b.code != 503 || !strings.Contains(b.body, "too many watchers") {
		t.Fatalf("a long-poll beyond the limit: %d %s", b.code, b.body)
	}
	resp, err := client.Get(url + "/watch")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a watcher beyond the limit: %d", resp.StatusCode)
	}
	set.set(shards.Status{Set: "team/queue", Identity: "pod-a", Shards: 16, Ready: true})
	if b := answer(t, poll); b.code != 200 {
		t.Fatalf("the waiting long-poll: %d", b.code)
	}
}

// nextShards returns the next shards event of s, skipping heartbeats.
func nextShards(t *testing.T, s *stream) (sseEvent, api.ShardsResponse) {
	t.Helper()
	for {
		ev := s.next()
		if ev.Comment == "heartbeat" {
			continue
		}
		if ev.Event != api.EventShards || ev.ID == "" {
			t.Fatalf("not a shards event: %+v", ev)
		}
		var r api.ShardsResponse
		if err := json.Unmarshal([]byte(ev.Data), &r); err != nil {
			t.Fatalf("event data is not a ShardsResponse: %v: %s", err, ev.Data)
		}
		return ev, r
	}
}

// TestShardsWatchPushesEachChangeEncodedOnce: in shard mode /watch sends
// "shards" events, the current state at once and one per change of the
// owned set or the members, each encoded once for every stream, byte for
// byte encoding/json's; a later stream counts each shard's expiresInMs
// down to when it writes; Last-Event-ID skips the state already seen.
func TestShardsWatchPushesEachChangeEncodedOnce(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	set := &fakeShardSet{status: owning, alive: true}
	h := shardsHandler(set, WithClock(clk))
	url, client := serve(t, h)
	want := func(r api.ShardsResponse) string { return strings.TrimSuffix(string(stdJSON(t, r)), "\n") }
	var streams []*stream
	for range 10 {
		streams = append(streams, openWatch(t, client, url, nil))
	}
	check := func(step string, wantEncoded int64, wantData string) string {
		t.Helper()
		var id string
		for i, s := range streams {
			ev, _ := nextShards(t, s)
			if ev.Data != wantData {
				t.Fatalf("%s: stream %d got\n%s\nwant\n%s", step, i, ev.Data, wantData)
			}
			id = ev.ID
		}
		if n := h.shards.encoded.Load(); n != wantEncoded {
			t.Fatalf("%s: %d events encoded for %d streams, want %d", step, n, len(streams), wantEncoded)
		}
		return id
	}
	check("the first state", 1, want(owningWant))

	moved := owning
	moved.Owned = []shards.Owned{owning.Owned[0], {Index: 7, Lease: "queue-7", LeaseUID: "uid-7", Token: 4, ExpiresIn: time.Second, ValidUntil: time.Unix(1000, 0)}}
	moved.Members = []string{"pod-a", "pod-b", "pod-c", "pod-d"}
	movedWant := api.ShardsResponse{Set: "team/queue", Identity: "pod-a", Shards: 16, Ready: true, Live: true,
		Members: moved.Members, Owned: []api.ShardToken{owningWant.Owned[0], {Index: 7, Lease: "team/queue-7", LeaseUID: "uid-7", Token: 4, ExpiresInMs: 1000}}}
	set.set(moved)
	id := check("a shard moved", 2, want(movedWant))
	if tag := do(h, "GET", "/shards").Header().Get("ETag"); id != tag {
		t.Fatalf("the event's id %s is not GET /shards's ETag %s", id, tag)
	}

	none := shards.Status{Set: "team/queue", Identity: "pod-a", Shards: 16, Ready: true}
	set.set(none)
	check("nothing owned", 3, want(api.ShardsResponse{Set: "team/queue", Identity: "pod-a", Shards: 16, Ready: true, Members: []string{}, Owned: []api.ShardToken{}}))

	set.set(moved)
	check("owned again", 4, want(movedWant))
	clk.Step(400 * time.Millisecond)
	late := openWatch(t, client, url, nil)
	_, r := nextShards(t, late)
	if len(r.Owned) != 2 || r.Owned[0].ExpiresInMs != 2100 || r.Owned[1].ExpiresInMs != 600 {
		t.Fatalf("a stream opened 400ms after the event was encoded got %+v, want expiresInMs 2100 and 600", r.Owned)
	}
	if n := h.shards.encoded.Load(); n != 4 {
		t.Fatalf("the late stream's event was encoded again (%d encoded)", n)
	}
	resumed := openWatch(t, client, url, map[string]string{"Last-Event-ID": id})
	set.set(none)
	if _, r := nextShards(t, resumed); len(r.Owned) != 0 {
		t.Fatalf("a stream resumed at the current state first got %+v, want the next change", r)
	}
}

// TestShardsWatchEndsOnCloseStreams: the server's shutdown ends a shards
// stream and answers a waiting /shards long-poll.
func TestShardsWatchEndsOnCloseStreams(t *testing.T) {
	set := &fakeShardSet{status: owning, alive: true}
	h := shardsHandler(set, WithClock(testingclock.NewFakeClock(t0)))
	url, client := serve(t, h)
	tag := do(h, "GET", "/shards").Header().Get("ETag")
	s := openWatch(t, client, url, nil)
	nextShards(t, s)
	poll := pollShards(context.Background(), client, url, "5m", tag)
	eventually(t, "two waiters", func() bool { return h.waiters.Load() == 2 })
	h.CloseStreams()
	if a := answer(t, poll); a.code != 304 {
		t.Fatalf("the long-poll on CloseStreams: %d", a.code)
	}
	eventually(t, "the stream ends", func() bool { return h.waiters.Load() == 0 })
}
