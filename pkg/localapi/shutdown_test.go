package localapi

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
)

// ended waits for the stream's end (the server finished the response).
func (s *stream) ended(t *testing.T) []string {
	t.Helper()
	var rest []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for l := range s.lines {
			rest = append(rest, l)
		}
	}()
	eventually(t, "the /watch stream to end", func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
	return rest
}

// lastState is the last leader event's state among a stream's lines.
func (s *stream) lastState(lines []string) LeaderResponse {
	s.t.Helper()
	var last LeaderResponse
	for _, l := range lines {
		if r, ok := dataState(s.t, l); ok {
			last = r
		}
	}
	return last
}

// serveReal serves h with NewServer's server on a real listener (through
// wrap, if not nil) until the test ends; it returns the server and its
// address.
func serveReal(t *testing.T, h http.Handler, wrap func(net.Listener) net.Listener) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer("", h)
	l := ln
	if wrap != nil {
		l = wrap(ln)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() { _ = srv.Close(); <-served })
	return srv, ln.Addr().String()
}

// writeHook is a listener whose connections make every write through
// write, which writes b to c.
type writeHook struct {
	net.Listener
	write func(c net.Conn, b []byte) (int, error)
}

func (l writeHook) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return hookedConn{Conn: c, write: l.write}, nil
}

type hookedConn struct {
	net.Conn
	write func(c net.Conn, b []byte) (int, error)
}

func (c hookedConn) Write(b []byte) (int, error) { return c.write(c.Conn, b) }

// TestShutdownEndsWatchStreamsAndLongPolls: Shutdown of NewServer's server
// ends every /watch stream (after its latest state) and answers every waiting
// long-poll with the state as it is, so it returns once they are done rather
// than at its deadline with the handlers still running.
func TestShutdownEndsWatchStreamsAndLongPolls(t *testing.T) {
	el := &fakeElector{status: following, alive: true}
	h := NewHandler(el, nil)
	srv, addr := serveReal(t, h, func(ln net.Listener) net.Listener { return LimitListener(ln, 0) })
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	url := "http://" + addr
	s := openWatch(t, client, url, nil)
	s.nextLeader()
	el.set(nobody) // el.Run's last publish
	s.nextLeader()
	tag, _ := leaderNow(t, h)
	poll := longPoll(context.Background(), client, url, "5m", tag)
	eventually(t, "the stream and the long-poll to be served", func() bool { return h.waiters.Load() == 2 })

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with a /watch and a long-poll open: %v (%d stream handler(s) still running)", err, h.waiters.Load())
	}
	if n := h.waiters.Load(); n != 0 {
		t.Errorf("%d stream handler(s) still running after Shutdown", n)
	}
	if rest := s.ended(t); len(strings.Join(rest, "")) != 0 {
		t.Errorf("the stream sent %q after the latest state, want nothing more", rest)
	}
	if a := answer(t, poll); a.code != http.StatusNotModified || a.etag != tag {
		t.Errorf("the long-poll answered %d %s %q at shutdown, want 304 with ETag %s", a.code, a.etag, a.body, tag)
	}
}

// TestShutdownSendsAStreamTheChangeItHasNotSentYet: a change published as
// Shutdown begins still reaches the stream before it ends.
func TestShutdownSendsAStreamTheChangeItHasNotSentYet(t *testing.T) {
	el := &fakeElector{status: leading, alive: true}
	h := NewHandler(el, nil)
	srv, addr := serveReal(t, h, nil)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	s := openWatch(t, client, "http://"+addr, nil)
	if _, r := s.nextLeader(); !r.IsLeader {
		t.Fatalf("first event %+v, want isLeader:true", r)
	}
	el.mu.Lock()
	el.status = nobody // published without waking the stream
	el.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if last := s.lastState(s.ended(t)); last.IsLeader || last.Holder != "" {
		t.Errorf("the stream's last state before it ended was %+v, want the latest (nobody leads)", last)
	}
}

// TestShutdownWaitsForAStreamStillWritingItsLastState: a /watch stream runs
// on its connection after its handler returned (stream.go), where
// http.Server's Shutdown does not see it; NewServer's Shutdown still returns
// only once the stream has written its latest state and ended, and says so
// (ctx's error) when its deadline comes first.
func TestShutdownWaitsForAStreamStillWritingItsLastState(t *testing.T) {
	el := &fakeElector{status: leading, alive: true}
	h := NewHandler(el, nil)
	var gate sync.RWMutex // the server's writes wait while it is locked
	srv, addr := serveReal(t, h, func(ln net.Listener) net.Listener {
		return writeHook{Listener: ln, write: func(c net.Conn, b []byte) (int, error) {
			gate.RLock()
			defer gate.RUnlock()
			return c.Write(b)
		}}
	})
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	s := openWatch(t, client, "http://"+addr, nil)
	s.nextLeader()

	gate.Lock() // the server's writes wait from here on
	el.set(nobody)
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := srv.Shutdown(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown returned %v while a stream could not write its latest state, want %v", err, context.DeadlineExceeded)
	}
	gate.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown once the stream could write: %v", err)
	}
	if n := h.waiters.Load(); n != 0 {
		t.Errorf("%d stream(s) still running after Shutdown returned", n)
	}
	if last := s.lastState(s.ended(t)); last.IsLeader {
		t.Errorf("the stream's last state was %+v, want the latest (nobody leads)", last)
	}
}

// TestETagChangesWhenAReleaseForIsExtended: extending a time out (POST
// /release?for=5m, then ?for=24h) changes the ETag, so a /watch stream and a
// waiting long-poll say so, and a conditional GET gets the new body; the
// countdown alone changes nothing.
func TestETagChangesWhenAReleaseForIsExtended(t *testing.T) {
	el := &fakeElector{status: leading, alive: true}
	h := NewHandler(el, nil)
	url, client := serve(t, h)
	post := func(q string, then election.Status) {
		t.Helper()
		resp, err := client.Post(url+"/release?for="+q, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("POST /release?for=%s: %d", q, resp.StatusCode)
		}
		el.set(then) // the loop publishes the time out
	}
	post("5m", timedOut) // "released for 4m59s"
	s := openWatch(t, client, url, nil)
	ev1, r1 := s.nextLeader()
	if r1.NotCandidate != "released for 4m59s" {
		t.Fatalf("first event %+v", r1)
	}
	counted := timedOut
	counted.NotCandidate = "released for 4m58s"
	el.set(counted) // the countdown: no event, same ETag
	if e, _ := leaderNow(t, h); e != ev1.ID {
		t.Fatalf("the countdown changed the ETag: %s -> %s", ev1.ID, e)
	}
	pctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // before the server's Close, which waits for the handlers
	poll := longPoll(pctx, client, url, "5m", ev1.ID)
	eventually(t, "the long-poll to wait", func() bool { return h.waiters.Load() == 2 })

	extended := timedOut
	extended.NotCandidate = "released for 23h59m59s"
	post("24h", extended)
	ev2, r2 := s.nextLeader()
	if ev2.ID == ev1.ID || r2.NotCandidate != extended.NotCandidate {
		t.Errorf("after extending the time out the stream sent id %s %+v, want a new ETag (was %s) and %q", ev2.ID, r2, ev1.ID, extended.NotCandidate)
	}
	if a := answer(t, poll); a.code != http.StatusOK || a.etag == ev1.ID || !strings.Contains(a.body, "23h59m59s") {
		t.Errorf("the long-poll answered %d %s %s, want 200 with the extended time out", a.code, a.etag, a.body)
	}
	if rec := getLeader(h, ev1.ID); rec.Code != http.StatusOK {
		t.Errorf("a conditional GET with the old ETag got %d, want 200", rec.Code)
	}
}

// TestShutdownOfTheDiagnosticsAndMetricsServers: their handlers serve no
// streams; their servers shut down cleanly.
func TestShutdownOfTheDiagnosticsAndMetricsServers(t *testing.T) {
	h := NewHandler(&fakeElector{status: following, alive: true}, http.NotFoundHandler())
	for _, hh := range []http.Handler{h.Diagnostics(), MetricsOnly(http.NotFoundHandler())} {
		srv := NewServer("127.0.0.1:0", hh)
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		cancel()
	}
}
