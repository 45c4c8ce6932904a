package framework

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// echoServer echoes every line back until the connection closes.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip writes msg and reads the echo, giving up after timeout.
func roundTrip(c net.Conn, r *bufio.Reader, msg string, timeout time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(timeout))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	line, err := r.ReadString('\n')
	return strings.TrimSuffix(line, "\n"), err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// proxiedEcho starts an echo server behind a proxy and one connection
// through it that has carried a line (all closed when the test ends).
func proxiedEcho(t *testing.T) (*TCPProxy, net.Conn, *bufio.Reader) {
	t.Helper()
	p, err := StartTCPProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, "one", 5*time.Second); err != nil || got != "one" {
		t.Fatalf("through the open proxy: %q, %v", got, err)
	}
	return p, c, r
}

func TestTCPProxyBlackholeStallsAndHeals(t *testing.T) {
	p, c, r := proxiedEcho(t)

	p.Blackhole(false)
	if !p.Blackholed() {
		t.Fatal("Blackholed() = false after Blackhole")
	}
	// The claim is about a period: nothing comes back while blackholed.
	if got, err := roundTrip(c, r, "two", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("through the blackholed proxy: %q, %v; want a timeout", got, err)
	}
	// A new connection is accepted but not forwarded.
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("dial the blackholed proxy: %v", err)
	}
	defer func() { _ = c2.Close() }()
	r2 := bufio.NewReader(c2)
	if got, err := roundTrip(c2, r2, "new", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("new connection through the blackholed proxy: %q, %v; want a timeout", got, err)
	}

	p.Heal()
	// The stalled bytes arrive after the heal, in order.
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || line != "two\n" {
		t.Fatalf("stalled line after heal: %q, %v", line, err)
	}
	if got, err := roundTrip(c, r, "three", 5*time.Second); err != nil || got != "three" {
		t.Fatalf("after heal: %q, %v", got, err)
	}
	_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := r2.ReadString('\n'); err != nil || line != "new\n" {
		t.Fatalf("held connection after heal: %q, %v", line, err)
	}
}

func TestTCPProxyBlackholeDropsConnections(t *testing.T) {
	p, c, r := proxiedEcho(t)
	p.Blackhole(true)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil || isTimeout(err) {
		t.Fatalf("read on a dropped connection: %v, want it closed", err)
	}
	p.Heal()
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c2.Close() }()
	if got, err := roundTrip(c2, bufio.NewReader(c2), "again", 5*time.Second); err != nil || got != "again" {
		t.Fatalf("new connection after heal: %q, %v", got, err)
	}
}

func TestTCPProxyCloseEndsHeldConnections(t *testing.T) {
	p, err := StartTCPProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	p.Blackhole(false)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	// Close must not hang on the held connection.
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case err := <-done:
		_ = err // Close's own error is not what this test checks
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung on a held connection")
	}
	if err := Poll(context.Background(), 10*time.Millisecond, 5*time.Second, func(context.Context) (bool, error) {
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		return err != nil && !isTimeout(err), nil
	}); err != nil {
		t.Fatalf("held connection still open after Close: %v", err)
	}
}

func TestWriteProxiedKubeconfig(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(src, []byte(`apiVersion: v1
kind: Config
clusters:
- name: envtest
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: Y2E=
contexts:
- name: envtest
  context: {cluster: envtest, user: admin}
current-context: envtest
users:
- name: admin
  user: {token: secret}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if up, err := UpstreamOf(src); err != nil || up != "127.0.0.1:6443" {
		t.Fatalf("UpstreamOf = %q, %v", up, err)
	}
	dst := filepath.Join(dir, "proxied.kubeconfig")
	if err := WriteProxiedKubeconfig(src, dst, "127.0.0.1:40001"); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Clusters["envtest"]
	if c.Server != "https://127.0.0.1:40001" || string(c.CertificateAuthorityData) != "ca" || cfg.AuthInfos["admin"].Token != "secret" {
		t.Fatalf("proxied kubeconfig: server %q, CA %q, token %q", c.Server, c.CertificateAuthorityData, cfg.AuthInfos["admin"].Token)
	}
}
