package localapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The slow-client defences: NewServer's timeouts, LimitListener's cap on
// connections and the cap on request bodies.

// limitedServer serves h as the sidecar does (NewServer on a LimitListener
// of maxConns), after adjust changes the server, and counts the connections
// it holds open. It returns the address; everything stops at the end.
type limitedServer struct {
	addr          string
	open, maxOpen atomic.Int64
	accepted      atomic.Int64
}

func startLimited(t *testing.T, h http.Handler, maxConns int, adjust func(*http.Server)) *limitedServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ls := &limitedServer{addr: ln.Addr().String()}
	srv := NewServer(ls.addr, h)
	if adjust != nil {
		adjust(srv.Server)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(&countingListener{Listener: LimitListener(ln, maxConns), ls: ls})
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
		// Close does not wait for the connections' goroutines (one may
		// linger after an error answer); goleak would.
		eventually(t, "the server's connections to end", func() bool { return ls.open.Load() == 0 })
	})
	return ls
}

// countingListener counts the connections the limited listener hands out
// and that are not closed yet. A connection leaves the count before its
// Close frees its slot (http.Server's ConnState hook runs after Close, so a
// count kept there can see the next connection before the last one left).
type countingListener struct {
	net.Listener
	ls *limitedServer
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.ls.accepted.Add(1)
	n := l.ls.open.Add(1)
	for m := l.ls.maxOpen.Load(); n > m && !l.ls.maxOpen.CompareAndSwap(m, n); m = l.ls.maxOpen.Load() {
	}
	return &countedConn{Conn: c, ls: l.ls}, nil
}

type countedConn struct {
	net.Conn
	ls   *limitedServer
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.ls.open.Add(-1) })
	return c.Conn.Close()
}

// dialIdle opens n connections to addr that never send a byte; they are
// closed at the end of the test.
func dialIdle(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", len(conns)+1, err)
		}
		conns = append(conns, c)
	}
	return conns
}

// getToken does GET /token on a fresh connection and returns the token.
func getToken(t *testing.T, addr string) int64 {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/token", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET /token: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	var tok TokenResponse
	if err := json.NewDecoder(resp.Body).Decode(&tok); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /token: %d (%v)", resp.StatusCode, err)
	}
	return tok.Token
}

func TestThousandIdleConnectionsDoNotStopTokenForOthers(t *testing.T) {
	ls := startLimited(t, NewHandler(&fakeElector{status: leading, alive: true}, nil), DefaultMaxConnections, nil)
	const idle = 1000
	dialIdle(t, ls.addr, idle)
	eventually(t, "the server to accept the idle connections", func() bool { return ls.accepted.Load() >= idle })
	if tok := getToken(t, ls.addr); tok != leading.Token {
		t.Fatalf("token %d, want %d", tok, leading.Token)
	}
}

// At the cap, a new client waits for a slot instead of being refused, and
// silent connections free theirs after ReadHeaderTimeout.
func TestConnectionsOverTheCapWaitForASlot(t *testing.T) {
	const maxConns = 8
	ls := startLimited(t, NewHandler(&fakeElector{status: leading, alive: true}, nil), maxConns, func(s *http.Server) {
		s.ReadHeaderTimeout = 200 * time.Millisecond
	})
	dialIdle(t, ls.addr, maxConns+4)
	eventually(t, "the idle connections to fill the cap", func() bool { return ls.open.Load() == maxConns })
	if tok := getToken(t, ls.addr); tok != leading.Token {
		t.Fatalf("token %d, want %d", tok, leading.Token)
	}
	if m := ls.maxOpen.Load(); m > maxConns {
		t.Fatalf("%d connections open at once, cap %d", m, maxConns)
	}
}

func TestSlowlorisIsCutOffByReadHeaderTimeout(t *testing.T) {
	el := &fakeElector{status: leading, alive: true}
	ls := startLimited(t, NewHandler(el, nil), 0, func(s *http.Server) {
		s.ReadHeaderTimeout = 200 * time.Millisecond
	})
	c, err := net.Dial("tcp", ls.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	// One byte of an endless header every few milliseconds, until the
	// server hangs up.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sent atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := io.WriteString(c, "GET /token HTTP/1.1\r\nHost: x\r\nX-Slow: "); err != nil {
			return
		}
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := c.Write([]byte{'a'}); err != nil {
					return
				}
				sent.Add(1)
			}
		}
	}()
	defer wg.Wait()
	defer close(stop)
	_ = c.SetReadDeadline(time.Now().Add(waitFor))
	got, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server still held the connection after %v (%d header bytes trickled)", waitFor, sent.Load())
	}
	if len(got) > 0 {
		t.Fatalf("the server answered a request whose headers never ended: %q", got)
	}
	eventually(t, "the server to drop the connection", func() bool { return ls.open.Load() == 0 })
}

func TestTooLargeBodyIsRefused(t *testing.T) {
	el := &fakeElector{status: leading, alive: true}
	url, client := serve(t, NewHandler(el, nil))
	big := bytes.Repeat([]byte("x"), 64<<10)
	for _, tt := range []struct {
		name, method, path string
		body               io.Reader
		wantCode           int
	}{
		{"release with a long body", "POST", "/release", bytes.NewReader(big), 413},
		{"release with a long chunked body", "POST", "/release", io.MultiReader(bytes.NewReader(big)), 413},
		{"release with one byte over the cap", "POST", "/release", bytes.NewReader(big[:MaxRequestBodyBytes+1]), 413},
		{"release for with a long body", "POST", "/release?for=1m", bytes.NewReader(big), 413},
		{"leader with a long body", "GET", "/leader", bytes.NewReader(big), 413},
		{"release with a short body", "POST", "/release", strings.NewReader("{}"), 204},
		{"release with a chunked body at the cap", "POST", "/release", io.MultiReader(bytes.NewReader(big[:MaxRequestBodyBytes])), 204},
	} {
		t.Run(tt.name, func(t *testing.T) {
			el.mu.Lock()
			el.released = 0
			el.mu.Unlock()
			req, _ := http.NewRequest(tt.method, url+tt.path, tt.body)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantCode {
				t.Fatalf("%d, want %d: %s", resp.StatusCode, tt.wantCode, body)
			}
			el.mu.Lock()
			released := el.released
			el.mu.Unlock()
			if tt.wantCode == 413 {
				var e ErrorResponse
				if err := json.Unmarshal(body, &e); err != nil || !strings.Contains(e.Error, "request body too large") {
					t.Fatalf("413 body %q (%v)", body, err)
				}
				if released != 0 {
					t.Fatal("a refused request released the lease")
				}
			} else if tt.path == "/release" && released != 1 {
				t.Fatalf("released %d times", released)
			}
		})
	}
}

func TestLimitListenerCloseEndsAWaitingAccept(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := LimitListener(inner, 1)
	client, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Close() }()
	first, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Close() }()
	errc := make(chan error, 1)
	go func() {
		c, err := ln.Accept() // waits: the one slot is taken
		if c != nil {
			_ = c.Close()
		}
		errc <- err
	}()
	_ = ln.Close()
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
	}
}

func TestLimitListenerFreesTheSlotOnClose(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := LimitListener(inner, 1)
	defer func() { _ = ln.Close() }()
	for i := range 3 { // one at a time, each after the last closed (twice)
		client, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c, err := ln.Accept()
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		_ = c.Close()
		_ = c.Close()
		_ = client.Close()
	}
}

func TestServerTimeoutsAreTheStatedOnes(t *testing.T) {
	s := NewServer("127.0.0.1:4040", NewHandler(&fakeElector{}, nil))
	if s.ReadHeaderTimeout != ReadHeaderTimeout || s.ReadTimeout != ReadTimeout || s.WriteTimeout != WriteTimeout ||
		s.IdleTimeout != IdleTimeout || s.MaxHeaderBytes != MaxHeaderBytes {
		t.Fatalf("server %+v", s)
	}
	if DefaultMaxConnections <= DefaultMaxWaiters+1000 {
		t.Fatalf("DefaultMaxConnections %d leaves no room beside %d watchers and 1,000 idle connections", DefaultMaxConnections, DefaultMaxWaiters)
	}
}

func TestOversizedHeadersAreRefused(t *testing.T) {
	ls := startLimited(t, NewHandler(&fakeElector{status: leading, alive: true}, nil), 0, nil)
	c, err := net.Dial("tcp", ls.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(waitFor))
	// net/http allows 4 KiB of slack over MaxHeaderBytes.
	big := strings.Repeat("a", MaxHeaderBytes+8<<10)
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		_, _ = fmt.Fprintf(c, "GET /token HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", big)
	}()
	defer func() { <-wrote }()
	defer func() { _ = c.Close() }()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("%d, want 431", resp.StatusCode)
	}
}

// The README's "Hardening" paragraph states these limits.
func TestReadmeStatesTheHardeningLimits(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n### Hardening\n")
	if !ok {
		t.Fatal("README has no Hardening section")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	sec = strings.Join(strings.Fields(sec), " ")
	secs := func(d time.Duration) string { return fmt.Sprintf("%d s", int(d.Seconds())) }
	for _, want := range []string{
		"headers within " + secs(ReadHeaderTimeout), "body within " + secs(ReadTimeout),
		secs(WriteTimeout) + " to be written", "idle for " + secs(IdleTimeout),
		fmt.Sprintf("headers over %d KiB (**431**)", MaxHeaderBytes>>10),
		fmt.Sprintf("bodies over %d KiB (**413**", MaxRequestBodyBytes>>10),
		fmt.Sprintf("at most %d connections", DefaultMaxConnections),
		fmt.Sprintf("the %d streams and long-polls", DefaultMaxWaiters),
		"1,000 idle connections", "FuzzHandler", "FuzzParse",
	} {
		if !strings.Contains(sec, want) {
			t.Errorf("README Hardening section lacks %q", want)
		}
	}
}
