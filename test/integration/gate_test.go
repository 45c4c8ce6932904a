package integration

import (
	"bytes"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// gate is a TCP port in front of a real sidecar for the README snippets'
// "not listening yet" case: until opened it drops every connection at
// once (accept, then reset), as a sidecar that is not serving yet; once
// open it forwards connections to the sidecar, noting the answers that
// begin with a 503.
type gate struct {
	ln      net.Listener
	target  string
	open    atomic.Bool
	dropped atomic.Int64 // connections dropped while closed
	got503  atomic.Int64 // forwarded connections whose first answer was a 503
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
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // a reset, not an orderly close
			}
			_ = c.Close()
			continue
		}
		go g.forward(c)
	}
}

func (g *gate) forward(c net.Conn) {
	g.track(c)
	up, err := net.Dial("tcp", g.target)
	if err != nil {
		_ = c.Close()
		return
	}
	g.track(up)
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
