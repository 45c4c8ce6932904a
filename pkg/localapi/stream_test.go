package localapi

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// dataState is the state on a raw /watch body's data line (ok false: not a
// data line).
func dataState(t *testing.T, line string) (LeaderResponse, bool) {
	t.Helper()
	data, ok := strings.CutPrefix(line, "data: ")
	if !ok {
		return LeaderResponse{}, false
	}
	var r LeaderResponse
	if err := json.Unmarshal([]byte(data), &r); err != nil {
		t.Fatal(err)
	}
	return r, true
}

// nextData reads a raw /watch body up to its next data line and returns
// that state.
func nextData(t *testing.T, br *bufio.Reader) LeaderResponse {
	t.Helper()
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream: %v", err)
		}
		if r, ok := dataState(t, line); ok {
			return r
		}
	}
}

// TestWatchOverHTTP11RunsOnItsOwnConnection: over HTTP/1.1 a /watch stream
// takes its connection over from net/http (what lets it go without
// net/http's per-connection goroutine and buffers; the bench measures the
// memory) and answers a chunked response that says the connection closes at
// its end; an HTTP/1.0 client, which cannot read chunks, is served through
// net/http with a body that ends with the connection. Both get the same
// events.
func TestWatchOverHTTP11RunsOnItsOwnConnection(t *testing.T) {
	el := &fakeElector{status: leading, alive: true}
	h := NewHandler(el, nil)
	var mu sync.Mutex
	hijacked := 0
	url, client := serve(t, h, func(s *http.Server) {
		s.ConnState = func(_ net.Conn, st http.ConnState) {
			if st == http.StateHijacked {
				mu.Lock()
				hijacked++
				mu.Unlock()
			}
		}
	})
	s := openWatch(t, client, url, nil)
	if _, r := s.nextLeader(); !r.IsLeader || r.Token != leading.Token {
		t.Fatalf("first event %+v, want the leader with token %d", r, leading.Token)
	}
	if te := s.resp.TransferEncoding; len(te) != 1 || te[0] != "chunked" || !s.resp.Close {
		t.Errorf("HTTP/1.1 stream: Transfer-Encoding %v, Connection: close %v; want chunked and close", te, s.resp.Close)
	}
	mu.Lock()
	n := hijacked
	mu.Unlock()
	if n != 1 {
		t.Errorf("%d connection(s) taken over from net/http for one HTTP/1.1 stream, want 1", n)
	}

	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(waitFor))
	if _, err := conn.Write([]byte("GET /watch HTTP/1.0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK || resp.ProtoMinor != 0 || len(resp.TransferEncoding) != 0 {
		t.Errorf("HTTP/1.0 stream: %s, Transfer-Encoding %v; want 200 in HTTP/1.0 without chunks", resp.Status, resp.TransferEncoding)
	}
	if r := nextData(t, bufio.NewReader(resp.Body)); !r.IsLeader || r.Token != leading.Token {
		t.Errorf("HTTP/1.0 stream's first event %+v, want the leader with token %d", r, leading.Token)
	}
	mu.Lock()
	n = hijacked
	mu.Unlock()
	if n != 1 {
		t.Errorf("the HTTP/1.0 stream's connection was taken over (%d in all), want it served by net/http", n)
	}
}
