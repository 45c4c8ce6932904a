package localapi

import (
	"net"
	"sync"
)

// DefaultMaxConnections caps the connections the local API serves at once
// (LimitListener). It is well above DefaultMaxWaiters (1024 streams and
// long-polls) plus 1,000 idle connections held by a misbehaving client, so
// that /token still answers in that case. A connection costs about 10-20
// KiB (a goroutine and its read and write buffers), so the cap also bounds
// the memory a flood of connections can take to some tens of MiB; a silent
// connection holds its slot for at most ReadHeaderTimeout, an idle
// keep-alive one for IdleTimeout.
const DefaultMaxConnections = 4096

// LimitListener returns a listener that accepts at most n connections at
// once (n <= 0: DefaultMaxConnections). At the cap, Accept waits until a
// connection closes: the next clients wait in the kernel's accept queue, as
// with golang.org/x/net/netutil.LimitListener. Close ends a waiting Accept.
func LimitListener(ln net.Listener, n int) net.Listener {
	if n <= 0 {
		n = DefaultMaxConnections
	}
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	sem       chan struct{} // one token per open connection
	done      chan struct{} // closed by Close
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

// limitConn gives its slot back on its first Close.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite passes through to the connection (a *net.TCPConn has it), so
// that the HTTP server can half-close and let an error answer reach a
// client that is still sending.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
