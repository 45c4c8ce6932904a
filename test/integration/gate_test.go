package integration

import (
	"bytes"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// gate is a TCP port in front of a real sidecar for the README snippets'
// "not serving yet" case: until opened it drops every connection (accept,
// read the request, then reset), as a stream dropped by a sidecar that is
// not serving; once open it forwards connections to the sidecar, noting
// the answers that begin with a 503 and the streams open now.
//
// It reads the request before the reset: Node 20's EventSource never
// reports a reset that arrives before it has sent its request, and never
// retries (reproduced alone; under load the reset came first in 2 of 3
// runs). A sidecar that is not listening at all refuses the connection,
// which every snippet reports.
type gate struct {
	ln      net.Listener
	target  string
	open    atomic.Bool
	dropped atomic.Int64 // connections dropped while closed
	got503  atomic.Int64 // forwarded connections whose first answer was a 503
	active  atomic.Int64 // forwarded connections open now
	mu      sync.Mutex
	conns   []net.Conn
}

func newGate(t *testing.T, target string) *gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{ln: ln, target: target}
	go g.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, c := range g.conns {
			_ = c.Close()
		}
	})
	return g
}

// addr is the gate's host:port.
func (g *gate) addr() string { return g.ln.Addr().String() }

func (g *gate) track(c net.Conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.conns = append(g.conns, c)
}

func (g *gate) serve() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		if !g.open.Load() {
			g.dropped.Add(1)
			g.track(c)
			go drop(c)
			continue
		}
		go g.forward(c)
	}
}

// drop resets c once its request has begun to arrive.
func drop(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _ = c.Read(make([]byte, 1))
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // a reset, not an orderly close
	}
	_ = c.Close()
}

func (g *gate) forward(c net.Conn) {
	g.track(c)
	up, err := net.Dial("tcp", g.target)
	if err != nil {
		_ = c.Close()
		return
	}
	g.track(up)
	g.active.Add(1)
	defer g.active.Add(-1)
	go func() {
		_, _ = io.Copy(up, c)
		_ = up.Close()
	}()
	buf := make([]byte, 32<<10)
	n, err := up.Read(buf)
	if n > 0 {
		if bytes.HasPrefix(buf[:n], []byte("HTTP/1.1 503")) {
			g.got503.Add(1)
		}
		if _, werr := c.Write(buf[:n]); werr != nil {
			err = werr
		}
	}
	if err == nil {
		_, _ = io.Copy(c, up)
	}
	_ = c.Close()
}
