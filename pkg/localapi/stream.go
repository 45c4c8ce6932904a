package localapi

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Where a /watch stream writes. Over HTTP/1.1 a stream takes its connection
// over from net/http (Hijack) and is served by a goroutine of its own that
// writes each event as one chunk straight to the socket. Served by net/http
// instead, each stream would keep, for as long as it lasts, the
// connection's goroutine with an 8 KiB stack (chunkWriter.writeHeader's frame
// alone is 2.8 KiB), the connection's 4 KiB read and write buffers and the
// response's 2 KiB one: about two thirds of what a stream cost
// (docs/benchmarks.md, "Push"). A second, small goroutine waits on a read of
// the connection, so a client that leaves is seen at once, as net/http's
// background read sees it. A ResponseWriter that cannot be hijacked (HTTP/2,
// a recorder) or an HTTP/1.0 client (no chunks) is served on the handler's
// goroutine through the ResponseWriter, with the same bytes in the body.

// streamConn is a stream's connection.
type streamConn interface {
	// open sends the response's headers.
	open() bool
	// send writes head and tail as one write (a flush; for a hijacked
	// connection, one chunk), within the write timeout; false if it failed.
	send(head, tail []byte) bool
	// gone is closed when the client has gone away.
	gone() <-chan struct{}
}

// responseStream is a stream served through its ResponseWriter.
type responseStream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	done    <-chan struct{}
	timeout time.Duration
}

func newResponseStream(w http.ResponseWriter, r *http.Request, timeout time.Duration) *responseStream {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	return &responseStream{w: w, rc: rc, done: r.Context().Done(), timeout: timeout}
}

func (s *responseStream) open() bool {
	s.w.WriteHeader(http.StatusOK)
	return s.send(nil, nil) // the headers, even when no event follows at once
}

func (s *responseStream) send(head, tail []byte) bool {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	for _, b := range [2][]byte{head, tail} {
		if len(b) > 0 {
			if _, err := s.w.Write(b); err != nil {
				return false
			}
		}
	}
	return s.rc.Flush() == nil
}

func (s *responseStream) gone() <-chan struct{} { return s.done }

// connStream is a stream on a hijacked HTTP/1.1 connection: a chunked
// response, and the connection closed at its end.
type connStream struct {
	conn    net.Conn
	head    []byte // the status line and headers, until open sends them
	done    chan struct{}
	timeout time.Duration
}

// chunks holds the buffers chunks are built in while they are written, so
// that a stream holds none between its events.
var chunks = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// lastChunk ends a chunked body.
var lastChunk = []byte("0\r\n\r\n")

// hijackStream takes r's connection over for a stream answered 200 with the
// headers set on w, and starts the goroutine that sees the client leave;
// nil if the connection cannot be taken over (then nothing was written).
func hijackStream(w http.ResponseWriter, r *http.Request, timeout time.Duration) *connStream {
	if r.ProtoMajor != 1 || r.ProtoMinor < 1 {
		return nil
	}
	// Anything the client sent after the request (net/http may have read
	// ahead into the returned reader) is not for this stream: it is dropped,
	// and watchClient discards what follows.
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil
	}
	var head bytes.Buffer
	head.WriteString("HTTP/1.1 200 OK\r\n")
	_ = w.Header().Write(&head)
	head.WriteString("Date: " + time.Now().UTC().Format(http.TimeFormat) + "\r\n" +
		"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
	s := &connStream{conn: conn, head: head.Bytes(), done: make(chan struct{}), timeout: timeout}
	go s.watchClient()
	return s
}

// watchClient reads the connection until the client closes it or the
// stream's end closes it, then closes done.
func (s *connStream) watchClient() {
	defer close(s.done)
	var b [64]byte
	for {
		if _, err := s.conn.Read(b[:]); err != nil {
			return
		}
	}
}

func (s *connStream) open() bool {
	ok := s.write(s.head)
	s.head = nil
	return ok
}

func (s *connStream) send(head, tail []byte) bool {
	n := len(head) + len(tail)
	if n == 0 {
		return true
	}
	bp := chunks.Get().(*[]byte)
	b := strconv.AppendInt((*bp)[:0], int64(n), 16)
	b = append(b, "\r\n"...)
	b = append(b, head...)
	b = append(b, tail...)
	b = append(b, "\r\n"...)
	ok := s.write(b)
	*bp = b[:0]
	chunks.Put(bp)
	return ok
}

func (s *connStream) write(b []byte) bool {
	_ = s.conn.SetWriteDeadline(time.Now().Add(s.timeout))
	_, err := s.conn.Write(b)
	return err == nil
}

func (s *connStream) gone() <-chan struct{} { return s.done }

// finish ends the stream: after a clean end (the server closing the
// streams), the last chunk; then the connection is closed.
func (s *connStream) finish(clean bool) {
	if clean {
		s.write(lastChunk)
	}
	_ = s.conn.Close()
}

// streamSet counts the streams running on connections of their own, so that
// the server's Shutdown can wait for them (http.Server does not track a
// hijacked connection).
type streamSet struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0
}

func (t *streamSet) add() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == 0 {
		t.idle = make(chan struct{})
	}
	t.n++
}

func (t *streamSet) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n--; t.n == 0 {
		close(t.idle)
	}
}

// wait returns when every stream counted has ended, or ctx's error.
func (t *streamSet) wait(ctx context.Context) error {
	t.mu.Lock()
	n, idle := t.n, t.idle
	t.mu.Unlock()
	if n == 0 {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Server is NewServer's server: an http.Server whose Shutdown also waits for
// the /watch streams that run on connections of their own.
type Server struct {
	*http.Server
	api *Handler
}

// Shutdown shuts the server down as http.Server's does (which, through
// CloseStreams, ends every stream after its latest state), then waits for
// the streams on connections of their own to end, until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.Server.Shutdown(ctx)
	if s.api == nil {
		return err
	}
	if werr := s.api.streams.wait(ctx); err == nil {
		err = werr
	}
	return err
}

// Close closes the server as http.Server's does and ends every stream
// (CloseStreams): a stream on a connection of its own ends after its latest
// state, or its write timeout.
func (s *Server) Close() error {
	err := s.Server.Close()
	if s.api != nil {
		s.api.CloseStreams()
	}
	return err
}
