package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// countingProxy sits between one client under test and the apiserver (the
// client's kubeconfig points at it over plain HTTP on localhost; it forwards
// with the admin credentials) and counts the client's Lease requests by
// verb, when each request starts. It attributes requests exactly, which the
// apiserver's apiserver_request_total cannot: that has no client label, and
// the apiserver's own Lease informer restarts its watch every 5-10 minutes,
// a WATCH no watch on Lease objects can see.
type countingProxy struct {
	srv        *http.Server
	kubeconfig string

	mu   sync.Mutex
	reqs []proxiedRequest
}

type proxiedRequest struct {
	at   time.Time
	verb string
}

func (e *env) startCountingProxy(dir string) (*countingProxy, error) {
	target, err := url.Parse(e.cp.Config.Host)
	if err != nil {
		return nil, err
	}
	rt, err := rest.TransportFor(e.cp.Config)
	if err != nil {
		return nil, fmt.Errorf("counting proxy: %w", err)
	}
	cp := &countingProxy{}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		Transport:     rt,
		FlushInterval: -1, // stream watch events at once
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	cp.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := leaseVerb(r); v != "" {
			cp.mu.Lock()
			cp.reqs = append(cp.reqs, proxiedRequest{at: time.Now(), verb: v})
			cp.mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = cp.srv.Serve(ln) }()
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: bench-proxy
  cluster:
    server: http://%s
contexts:
- name: bench-proxy
  context:
    cluster: bench-proxy
    user: bench-proxy
current-context: bench-proxy
users:
- name: bench-proxy
  user: {}
`, ln.Addr())
	cp.kubeconfig = filepath.Join(dir, "proxy.kubeconfig")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(cp.kubeconfig, []byte(kc), 0o600); err != nil {
		return nil, err
	}
	return cp, nil
}

// leaseVerb classifies a request the way the apiserver labels it ("" if it
// is not about Leases).
func leaseVerb(r *http.Request) string {
	p := strings.TrimSuffix(r.URL.Path, "/")
	i := strings.Index(p, "/leases")
	if !strings.HasPrefix(p, "/apis/coordination.k8s.io/") || i < 0 {
		return ""
	}
	collection := i+len("/leases") == len(p)
	switch r.Method {
	case http.MethodGet:
		if w := r.URL.Query().Get("watch"); w == "true" || w == "1" {
			return "WATCH"
		}
		if collection {
			return "LIST"
		}
		return "GET"
	default:
		return r.Method
	}
}

// between counts the requests started in (from, to].
func (cp *countingProxy) between(from, to time.Time) verbCounts {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	out := verbCounts{}
	for _, r := range cp.reqs {
		if r.at.After(from) && !r.at.After(to) {
			out[r.verb]++
		}
	}
	return out
}

func (cp *countingProxy) stop() { _ = cp.srv.Close() }
