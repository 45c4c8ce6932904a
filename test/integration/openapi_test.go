package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
	"github.com/elector-sidecar/elector-sidecar/pkg/localapi"
	"github.com/elector-sidecar/elector-sidecar/pkg/shards"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// spec is docs/openapi.yaml, loaded and validated, with a router for it and
// the (method path status) triples checked so far.
type spec struct {
	t      *testing.T
	doc    *openapi3.T
	router routers.Router
	mu     sync.Mutex
	seen   map[string]bool
}

func loadSpec(t *testing.T) *spec {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(filepath.Join(root, "docs", "openapi.yaml"))
	if err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("docs/openapi.yaml is not a valid OpenAPI description: %v", err)
	}
	doc.Servers = nil // match the test servers' addresses, not 127.0.0.1:4040
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &spec{t: t, doc: doc, router: router, seen: map[string]bool{}}
}

// documented returns every (method path status) the description lists.
func (s *spec) documented() []string {
	var out []string
	for path, item := range s.doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status := range op.Responses.Map() {
				out = append(out, method+" "+path+" "+status)
			}
		}
	}
	sort.Strings(out)
	return out
}

// check sends req to base and validates the answer against the
// description: the status is documented for the operation, the headers
// and the body match. It returns the status and the body. A /watch answer
// is read up to its first event, whose data must be a Leader.
func (s *spec) check(base string, req *http.Request) (int, []byte) {
	s.t.Helper()
	u, err := req.URL.Parse(base + req.URL.RequestURI())
	if err != nil {
		s.t.Fatal(err)
	}
	req.URL, req.Host, req.RequestURI = u, u.Host, ""
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req = req.WithContext(ctx)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", req.Method, req.URL.RequestURI(), err)
	}
	defer func() { _ = resp.Body.Close() }()
	name := req.Method + " " + req.URL.RequestURI()
	var body []byte
	stream := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	if stream && req.Method == http.MethodGet {
		body = s.firstEvent(name, resp.Body)
	} else if body, err = io.ReadAll(resp.Body); err != nil {
		s.t.Fatalf("%s: reading the answer: %v", name, err)
	}
	if req.Method == http.MethodHead {
		return resp.StatusCode, body // HEAD: checked against GET by the caller
	}
	route, params, err := s.router.FindRoute(req)
	if err != nil {
		if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
			s.errorBody(name, resp.StatusCode, body)
			return resp.StatusCode, body
		}
		s.t.Fatalf("%s answered %d but the description has no such operation: %v", name, resp.StatusCode, err)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, ExcludeResponseBody: stream},
	}
	if err := openapi3filter.ValidateResponse(ctx, in); err != nil {
		s.t.Errorf("%s: the %d answer does not match docs/openapi.yaml: %v\nbody: %s", name, resp.StatusCode, err, body)
	}
	s.mu.Lock()
	s.seen[fmt.Sprintf("%s %s %d", req.Method, route.Path, resp.StatusCode)] = true
	s.mu.Unlock()
	return resp.StatusCode, body
}

// firstEvent reads a /watch stream up to its first event and validates the
// event: type "leader", an id, data a Leader (a shard set's: "shards", a
// Shards).
func (s *spec) firstEvent(name string, r io.Reader) []byte {
	s.t.Helper()
	var id, event, data string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "" && data != "":
			if (event != "leader" && event != "shards") || id == "" {
				s.t.Errorf("%s: the first event has id %q and type %q, want an id and type leader or shards", name, id, event)
			}
			schema := map[string]string{"leader": "Leader", "shards": "Shards"}[event]
			s.schema(name+" event data", schema, []byte(data))
			return []byte(data)
		case strings.HasPrefix(line, "id: "):
			id = line[4:]
		case strings.HasPrefix(line, "event: "):
			event = line[7:]
		case strings.HasPrefix(line, "data: "):
			data = line[6:]
		}
	}
	s.t.Fatalf("%s: the stream ended before its first event: %v", name, sc.Err())
	return nil
}

// schema validates body against components.schemas[name].
func (s *spec) schema(what, name string, body []byte) {
	s.t.Helper()
	ref := s.doc.Components.Schemas[name]
	if ref == nil || ref.Value == nil {
		s.t.Fatalf("docs/openapi.yaml has no schema %s", name)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		s.t.Errorf("%s: not JSON (%v): %s", what, err, body)
		return
	}
	if err := ref.Value.VisitJSON(v); err != nil {
		s.t.Errorf("%s does not match the %s schema: %v\n%s", what, name, err, body)
	}
}

// errorBody checks an answer outside any operation (404, 405) against the
// Error schema.
func (s *spec) errorBody(name string, status int, body []byte) {
	s.t.Helper()
	s.schema(fmt.Sprintf("%s (%d)", name, status), "Error", body)
}

// openAPIElector is the election as the handler sees it, set by the test.
type openAPIElector struct {
	mu         sync.Mutex
	status     election.Status
	alive      bool
	releaseErr error
}

func (e *openAPIElector) set(f func(*openAPIElector)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f(e)
}

func (e *openAPIElector) Status() election.Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.status
}

func (e *openAPIElector) Changed() <-chan struct{} { return make(chan struct{}) }

func (e *openAPIElector) Release(ctx context.Context) error { return e.ReleaseFor(ctx, 0) }

func (e *openAPIElector) ReleaseFor(context.Context, time.Duration) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.releaseErr
}

func (e *openAPIElector) Alive() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.alive
}

// openAPISet is a shard set as the handler sees it, set by the test.
type openAPISet struct {
	mu         sync.Mutex
	status     shards.Status
	releaseErr error
}

func (e *openAPISet) set(f func(*openAPISet)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f(e)
}

func (e *openAPISet) Peek() shards.Status { return e.Status() }

func (e *openAPISet) Status() shards.Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.status
}

func (e *openAPISet) Changed() <-chan struct{} { return make(chan struct{}) }

func (e *openAPISet) Release(context.Context, int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.releaseErr
}

func (e *openAPISet) Alive() bool { return true }

func newReq(method, target string, hdr ...string) *http.Request {
	req := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return req
}

// bigReq is a request with a body over localapi.MaxRequestBodyBytes.
func bigReq(method, target string) *http.Request {
	return httptest.NewRequest(method, target, strings.NewReader(strings.Repeat("x", localapi.MaxRequestBodyBytes+1)))
}

// TestOpenAPIDescribesTheLocalAPI: docs/openapi.yaml is a valid OpenAPI
// description of the local API. Every route the handler serves is in it and
// every operation in it is served; every status it lists for an operation
// is produced by the handler (driven through each case: leader, follower,
// not ready, a dead loop, release failures, the waiter limit, bad queries,
// big bodies) and every answer, including /watch's first event, validates
// against it; every GET answers HEAD with the same status. Then the same
// checks hold for the answers of real sidecars, a leader and a follower.
func TestOpenAPIDescribesTheLocalAPI(t *testing.T) {
	s := loadSpec(t)

	// Routes served <-> operations described.
	el := &openAPIElector{}
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = io.WriteString(w, "elector_is_leader{lease=\"ns/l\"} 1\n")
	})
	h := localapi.NewHandler(el, metrics, localapi.WithMaxWaiters(1))
	for path, method := range h.Routes() {
		item := s.doc.Paths.Find(path)
		if item == nil || item.GetOperation(method) == nil {
			t.Errorf("the handler serves %s %s; docs/openapi.yaml does not describe it", method, path)
		}
	}
	for path, item := range s.doc.Paths.Map() {
		for method := range item.Operations() {
			if h.Routes()[path] != method {
				t.Errorf("docs/openapi.yaml describes %s %s; the handler does not serve it", method, path)
			}
		}
	}

	srv := httptest.NewServer(h)
	defer srv.Close()
	leading := election.Status{Lease: "ns/l", Identity: "pod-a", Ready: true, Holder: "pod-a", HoldsLease: true, LeaseTransitions: 7,
		LeaseUID: "uid-1", IsLeader: true, Token: 7, ExpiresIn: 2500 * time.Millisecond, ValidUntil: time.Now().Add(time.Hour), LastToken: 7, Candidate: true}
	following := election.Status{Lease: "ns/l", Identity: "pod-a", Ready: true, Holder: "pod-b", LeaseTransitions: 7, LeaseUID: "uid-1", Candidate: true}
	unsafe := leading
	unsafe.IsLeader, unsafe.Token, unsafe.ExpiresIn = false, 0, 0
	notReady := election.Status{Lease: "ns/l", Identity: "pod-a", Candidate: true}
	el.set(func(e *openAPIElector) { e.status, e.alive = leading, true })

	want := func(req *http.Request, code int) []byte {
		t.Helper()
		got, body := s.check(srv.URL, req)
		if got != code {
			t.Fatalf("%s %s: %d, want %d: %s", req.Method, req.URL.RequestURI(), got, code, body)
		}
		return body
	}
	// Every GET answers HEAD with the same status and no body.
	for path, method := range h.Routes() {
		if method != http.MethodGet || path == "/watch" {
			continue
		}
		get, _ := s.check(srv.URL, newReq("GET", path))
		head, body := s.check(srv.URL, newReq("HEAD", path))
		if head != get || len(body) != 0 {
			t.Errorf("HEAD %s: %d with %d bytes, GET %d: want the same status and no body", path, head, len(body), get)
		}
	}

	// The leader.
	body := want(newReq("GET", "/leader"), 200)
	var lr localapi.LeaderResponse
	_ = json.Unmarshal(body, &lr)
	resp, err := http.Get(srv.URL + "/leader")
	if err != nil {
		t.Fatal(err)
	}
	etag := resp.Header.Get("ETag")
	_ = resp.Body.Close()
	want(newReq("GET", "/leader", "If-None-Match", etag), 304)
	want(newReq("GET", "/leader?wait=1ms", "If-None-Match", etag), 304)
	want(newReq("GET", "/leader?wait=6m"), 400)
	want(newReq("GET", "/leader?bogus=1"), 400)
	want(bigReq("GET", "/leader"), 413)
	want(newReq("GET", "/token"), 200)
	want(newReq("GET", "/token", "Accept", "text/plain"), 200)
	want(bigReq("GET", "/token"), 413)
	want(newReq("GET", "/watch"), 200)
	want(newReq("GET", "/watch?x=1"), 400)
	want(bigReq("GET", "/watch"), 413)
	want(newReq("GET", "/healthz"), 200)
	want(bigReq("GET", "/healthz"), 413)
	want(newReq("GET", "/readyz"), 200)
	want(bigReq("GET", "/readyz"), 413)
	want(newReq("GET", "/metrics"), 200)
	want(bigReq("GET", "/metrics"), 413)
	want(newReq("POST", "/release"), 204)
	want(newReq("POST", "/release?for=5m"), 204)
	want(newReq("POST", "/release?for=25h"), 400)
	want(bigReq("POST", "/release"), 413)
	// Outside any operation: 404 and 405 with the Error body.
	want(newReq("GET", "/tokens"), 404)
	want(newReq("DELETE", "/token"), 405)
	want(newReq("GET", "/release"), 405)

	// The waiter limit (1 here): while a /watch stream holds the slot, the
	// next stream and a long-poll get 503 with Retry-After. (A long-poll
	// takes a slot as a stream does: pkg/localapi's
	// TestWatchersAndLongPollsBeyondTheLimitGet503.)
	hold := holdTheOnlySlot(t, srv.URL)
	want(newReq("GET", "/watch"), 503)
	want(newReq("GET", "/leader?wait=5m", "If-None-Match", etag), 503)
	hold()

	// A follower, a holder that cannot prove its term, not ready, a dead loop.
	el.set(func(e *openAPIElector) { e.status = following })
	want(newReq("GET", "/token"), 409)
	el.set(func(e *openAPIElector) { e.status = unsafe })
	want(newReq("GET", "/token"), 503)
	el.set(func(e *openAPIElector) { e.status = notReady })
	want(newReq("GET", "/token"), 503)
	want(newReq("GET", "/readyz"), 503)
	want(newReq("GET", "/leader"), 200)
	el.set(func(e *openAPIElector) { e.status, e.alive = leading, false })
	want(newReq("GET", "/healthz"), 503)

	// Release failures.
	for err, code := range map[error]int{
		election.ErrNotRunning:              503,
		election.ErrReleaseNotProcessed:     503,
		election.ErrReleaseUnconfirmed:      504,
		fmt.Errorf("the apiserver is gone"): 502,
	} {
		el.set(func(e *openAPIElector) { e.releaseErr = err })
		want(newReq("POST", "/release"), code)
	}

	// A shard set (WithShards): its routes, and the single Lease's 404s.
	set := &openAPISet{status: shards.Status{Set: "ns/q", Identity: "pod-a", Shards: 4, Ready: true, Live: true, Members: []string{"pod-a", "pod-b"},
		Owned: []shards.Owned{{Index: 1, Lease: "q-1", LeaseUID: "uid-q1", Token: 3, ExpiresIn: 2500 * time.Millisecond, ValidUntil: time.Now().Add(time.Hour)}}}}
	hs := localapi.NewHandler(nil, metrics, localapi.WithShards(set), localapi.WithMaxWaiters(1))
	if !maps.Equal(hs.Routes(), h.Routes()) {
		t.Errorf("a shard set serves %v, a single Lease %v: want the same routes (the other mode's answer 404)", hs.Routes(), h.Routes())
	}
	ssrv := httptest.NewServer(hs)
	defer ssrv.Close()
	wantS := func(req *http.Request, code int) []byte {
		t.Helper()
		got, body := s.check(ssrv.URL, req)
		if got != code {
			t.Fatalf("shard set: %s %s: %d, want %d: %s", req.Method, req.URL.RequestURI(), got, code, body)
		}
		return body
	}
	want(newReq("GET", "/shards"), 404)
	want(newReq("GET", "/shards/1/token"), 404)
	want(newReq("POST", "/release?shard=1"), 400)
	wantS(newReq("GET", "/leader"), 404)
	wantS(newReq("GET", "/token"), 404)
	wantS(newReq("GET", "/shards"), 200)
	resp, err = http.Get(ssrv.URL + "/shards")
	if err != nil {
		t.Fatal(err)
	}
	stag := resp.Header.Get("ETag")
	_ = resp.Body.Close()
	wantS(newReq("GET", "/shards", "If-None-Match", stag), 304)
	wantS(newReq("GET", "/shards?wait=1ms", "If-None-Match", stag), 304)
	wantS(newReq("GET", "/shards?wait=6m"), 400)
	wantS(bigReq("GET", "/shards"), 413)
	wantS(newReq("GET", "/shards/1/token"), 200)
	wantS(newReq("GET", "/shards/1/token", "Accept", "text/plain"), 200)
	wantS(newReq("GET", "/shards/2/token"), 409)
	wantS(newReq("GET", "/shards/x/token"), 400)
	wantS(newReq("GET", "/shards/4/token"), 404)
	wantS(bigReq("GET", "/shards/1/token"), 413)
	wantS(newReq("GET", "/watch"), 200)
	wantS(newReq("GET", "/healthz"), 200)
	wantS(newReq("GET", "/readyz"), 200)
	wantS(newReq("POST", "/release?shard=1"), 204)
	wantS(newReq("POST", "/release"), 400)
	wantS(newReq("POST", "/release?shard=1&for=5m"), 400)
	for err, code := range map[error]int{shards.ErrNotHeld: 409, shards.ErrNoSuchShard: 404} {
		set.set(func(e *openAPISet) { e.releaseErr = err })
		wantS(newReq("POST", "/release?shard=1"), code)
	}
	// The waiter limit (1): while a /watch stream holds the slot, a /shards
	// long-poll gets 503.
	hold = holdTheOnlySlot(t, ssrv.URL)
	wantS(newReq("GET", "/shards?wait=5m", "If-None-Match", stag), 503)
	hold()
	set.set(func(e *openAPISet) { e.status = shards.Status{Set: "ns/q", Identity: "pod-a", Shards: 4} })
	wantS(newReq("GET", "/shards/1/token"), 503)

	// Every documented status was produced.
	if n := len(s.documented()); n < 20 {
		t.Fatalf("docs/openapi.yaml documents %d (method path status) answers; the check is not reading the real description", n)
	}
	for _, d := range s.documented() {
		if !s.seen[d] {
			t.Errorf("docs/openapi.yaml documents %s; the handler never answered it in this test", d)
		}
	}

	// Real sidecars: a leader's and a follower's answers match too.
	g := newGroup(t, testTimings)
	cs := g.start("pod-a", "pod-b")
	leader, tok := g.waitLeader(startupTimeout)
	follower := cs[0]
	if follower == leader {
		follower = cs[1]
	}
	g.waitAllSee(leader, tok.Token)
	for _, c := range []struct {
		proc     *framework.Candidate
		token    int
		isLeader bool
	}{{leader, 200, true}, {follower, 409, false}} {
		base := "http://" + c.proc.Spec.HTTPAddress
		for _, path := range []string{"/leader", "/healthz", "/readyz", "/metrics"} {
			if got, body := s.check(base, newReq("GET", path)); got != 200 {
				t.Errorf("%s GET %s: %d: %s", c.proc.Identity(), path, got, body)
			}
		}
		if got, body := s.check(base, newReq("GET", "/token")); got != c.token {
			t.Errorf("%s GET /token: %d, want %d: %s", c.proc.Identity(), got, c.token, body)
		}
		got, data := s.check(base, newReq("GET", "/watch"))
		var st localapi.LeaderResponse
		if err := json.Unmarshal(data, &st); got != 200 || err != nil || st.IsLeader != c.isLeader {
			t.Errorf("%s GET /watch: %d, first event %s (%v), want isLeader %v", c.proc.Identity(), got, data, err, c.isLeader)
		}
	}
	if got, body := s.check("http://"+leader.Spec.HTTPAddress, newReq("POST", "/release")); got != 204 {
		t.Errorf("the leader's POST /release: %d: %s", got, body)
	}
	if !slices.Contains(s.documented(), "POST /release 204") {
		t.Error("docs/openapi.yaml does not document POST /release 204")
	}
}

// holdTheOnlySlot opens a /watch stream on base (a handler with one waiter
// slot) and reads its first line, so its handler holds the slot; it returns
// the function that closes the stream. Streams opened before free the slot
// only once their handlers see them gone: until then a 503 is retried, for
// up to 30s.
func holdTheOnlySlot(t *testing.T, base string) (release func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	for deadline := time.Now().Add(30 * time.Second); ; {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/watch", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusOK {
			release = func() { cancel(); _ = resp.Body.Close() }
			if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
				release()
				t.Fatalf("GET /watch: reading its first line: %v", err)
			}
			return release
		}
		_ = resp.Body.Close()
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("GET /watch: %d for 30s, want a stream once the earlier ones have ended", resp.StatusCode)
		}
	}
}
