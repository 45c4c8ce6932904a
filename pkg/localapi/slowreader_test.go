package localapi

import (
	"bufio"
	"bytes"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// TestWatchReaderThatPausesFindsTheQueuedEventsInOrderTheLatestLast: what
// push.go and the README say a slow reader gets. A reader that stops
// reading while the state changes 21 times finds, when it reads again, the
// 21 events written meanwhile (each change waits here until the handler
// wrote it; changes the handler sees together are merged into one), in
// order, the latest state last: a reader that acts only on the latest must
// read all that is queued first.
func TestWatchReaderThatPausesFindsTheQueuedEventsInOrderTheLatestLast(t *testing.T) {
	el := &fakeElector{status: following, alive: true}
	var written atomic.Int64
	h := NewHandler(el, nil)
	// The server's connections count the leader events written to them.
	_, addr := serveReal(t, h, func(ln net.Listener) net.Listener {
		return writeHook{Listener: ln, write: func(c net.Conn, b []byte) (int, error) {
			n, err := c.Write(b)
			written.Add(int64(bytes.Count(b[:n], []byte("event: leader"))))
			return n, err
		}}
	})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_, _ = conn.Write([]byte("GET /watch HTTP/1.1\r\nHost: x\r\n\r\n"))
	br := bufio.NewReader(conn)
	readData := func() LeaderResponse {
		t.Helper()
		_ = conn.SetReadDeadline(time.Now().Add(waitFor))
		return nextData(t, br)
	}
	readData() // the current state
	const n = 20
	for i := 1; i <= n; i++ { // the reader does not read meanwhile
		st := leading
		st.Token = int64(100 + i)
		el.set(st)
		// The handler writes it (into the socket buffers: nobody reads).
		eventually(t, "the event written", func() bool { return written.Load() == int64(1+i) })
	}
	el.set(nobody)
	var tokens []int64
	for {
		r := readData()
		if !r.IsLeader {
			if r.Holder != "" {
				t.Fatalf("a state that was never published: %+v", r)
			}
			break // the latest
		}
		tokens = append(tokens, r.Token)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("events out of order: tokens %v", tokens)
		}
	}
	if len(tokens) != n {
		t.Fatalf("the paused reader found %d leader events for %d changes written: %v", len(tokens), n, tokens)
	}
	t.Logf("a paused reader found %d queued leader events, then the latest state", len(tokens))
}
