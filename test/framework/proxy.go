package framework

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync"

	"k8s.io/client-go/tools/clientcmd"
)

// TCPProxy forwards TCP connections from a listener on 127.0.0.1 to one
// upstream address (the apiserver), byte for byte: TLS and client
// certificates pass through, so a kubeconfig that only changes the server's
// port (WriteProxiedKubeconfig) works unchanged. It can cut its clients off
// from the upstream the way a network partition does:
//
//   - Blackhole(false): nothing is forwarded any more in either direction;
//     established connections stay open and stall (their bytes wait, as in
//     a partition that heals before TCP gives up), new connections are
//     accepted but never connected upstream;
//   - Blackhole(true): the same, and every established connection is closed
//     at once (the client sees a reset and reconnects into the blackhole);
//   - Heal: forwarding resumes; stalled connections carry on, held new
//     connections are connected upstream.
type TCPProxy struct {
	upstream string
	ln       net.Listener

	mu     sync.Mutex
	open   chan struct{} // closed while forwarding; replaced by an open one while blackholed
	conns  map[net.Conn]struct{}
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup
}

// StartTCPProxy listens on a free 127.0.0.1 port and forwards to upstream (host:port).
func StartTCPProxy(upstream string) (*TCPProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("tcp proxy to %s: %w", upstream, err)
	}
	p := &TCPProxy{upstream: upstream, ln: ln, open: make(chan struct{}), conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	close(p.open)
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr returns the proxy's listening address (127.0.0.1:port).
func (p *TCPProxy) Addr() string { return p.ln.Addr().String() }

// Blackholed reports whether the proxy is cut off.
func (p *TCPProxy) Blackholed() bool {
	select {
	case <-p.gate():
		return false
	default:
		return true
	}
}

// Blackhole stops forwarding (see TCPProxy); with drop it also closes every
// established connection.
func (p *TCPProxy) Blackhole(drop bool) {
	p.mu.Lock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default: // already blackholed
	}
	var victims []net.Conn
	if drop {
		for c := range p.conns {
			victims = append(victims, c)
		}
	}
	p.mu.Unlock()
	for _, c := range victims {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, not an orderly close
		}
		_ = c.Close()
	}
}

// Heal resumes forwarding.
func (p *TCPProxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// Close stops listening, closes every connection and waits for the goroutines.
func (p *TCPProxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	err := p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *TCPProxy) gate() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

// waitOpen blocks while the proxy is blackholed; false if it was closed.
func (p *TCPProxy) waitOpen() bool {
	select {
	case <-p.gate():
		return true
	case <-p.done:
		return false
	}
}

// track registers c so Blackhole(true) and Close reach it; false if closed.
func (p *TCPProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *TCPProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *TCPProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if !p.track(c) {
			_ = c.Close()
			return
		}
		p.wg.Add(1)
		go p.handle(c)
	}
}

func (p *TCPProxy) handle(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	// A connection accepted while blackholed is held, not connected.
	if !p.waitOpen() {
		return
	}
	up, err := net.Dial("tcp", p.upstream)
	if err != nil {
		return // the upstream is down: the client sees the connection close
	}
	if !p.track(up) {
		_ = up.Close()
		return
	}
	defer p.untrack(up)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pump(up, client) }()
	go func() { defer wg.Done(); p.pump(client, up) }()
	wg.Wait()
}

// pump copies src to dst while the proxy is open; while it is blackholed it
// neither reads nor writes. When either side ends, both are closed.
func (p *TCPProxy) pump(dst, src net.Conn) {
	defer func() { _ = dst.Close() }()
	defer func() { _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		if !p.waitOpen() {
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			// Bytes read just before a blackhole wait for the heal too.
			if !p.waitOpen() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or an error: no half-close, both sides end
		}
	}
}

// WriteProxiedKubeconfig writes to dst a copy of the kubeconfig src whose
// clusters' server addresses point at proxyAddr (host:port), keeping the
// scheme, certificates and credentials. The apiserver's serving certificate
// must be valid for proxyAddr's host (envtest's is, for 127.0.0.1).
func WriteProxiedKubeconfig(src, dst, proxyAddr string) error {
	cfg, err := clientcmd.LoadFromFile(src)
	if err != nil {
		return fmt.Errorf("proxied kubeconfig: %w", err)
	}
	for name, c := range cfg.Clusters {
		u, err := url.Parse(c.Server)
		if err != nil {
			return fmt.Errorf("proxied kubeconfig: cluster %s: server %q: %w", name, c.Server, err)
		}
		u.Host = proxyAddr
		c.Server = u.String()
	}
	if err := clientcmd.WriteToFile(*cfg, dst); err != nil {
		return fmt.Errorf("proxied kubeconfig: %w", err)
	}
	return os.Chmod(dst, 0o600)
}

// UpstreamOf returns host:port of the server in a kubeconfig's current context
// (or its only cluster): what a TCPProxy in front of it forwards to.
func UpstreamOf(kubeconfig string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		return "", err
	}
	cluster := ""
	if ctx := cfg.Contexts[cfg.CurrentContext]; ctx != nil {
		cluster = ctx.Cluster
	}
	c := cfg.Clusters[cluster]
	if c == nil && len(cfg.Clusters) == 1 {
		for _, only := range cfg.Clusters {
			c = only
		}
	}
	if c == nil {
		return "", fmt.Errorf("%s: no cluster for the current context %q", kubeconfig, cfg.CurrentContext)
	}
	u, err := url.Parse(c.Server)
	if err != nil {
		return "", err
	}
	return u.Host, nil
}
