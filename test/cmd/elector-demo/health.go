package main

// The demo's health endpoint, for the sidecar's --app-health-url (the
// chart's appHealth values): GET /healthz answers 200 while the demo is
// healthy and 503 after it was told to fail; POST /health?fail=true|false
// switches it. `elector-demo health fail|pass` sends that POST from inside
// the container (the image has no curl):
//
//	kubectl exec POD -c app -- /elector-demo health fail

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// defaultHealthAddr is where `elector-demo health` finds the endpoint
// unless ELECTOR_DEMO_HEALTH_LISTEN or --addr says otherwise.
const defaultHealthAddr = "127.0.0.1:8080"

// healthResponse is the body of GET /healthz.
type healthResponse struct {
	Healthy bool   `json:"healthy"`
	Error   string `json:"error,omitempty"`
}

// health is the demo's switchable health endpoint.
type health struct {
	failing atomic.Bool
	logf    func(format string, a ...any)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

type errorBody struct {
	Error string `json:"error"`
}

func (h *health) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeJSON(w, http.StatusMethodNotAllowed, errorBody{"method " + r.Method + " not allowed on /healthz; use GET"})
			return
		}
		if h.failing.Load() {
			writeJSON(w, http.StatusServiceUnavailable, healthResponse{Error: "failing on request (POST /health?fail=false to recover)"})
			return
		}
		writeJSON(w, http.StatusOK, healthResponse{Healthy: true})
	case "/health":
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			writeJSON(w, http.StatusMethodNotAllowed, errorBody{"method " + r.Method + " not allowed on /health; use POST"})
			return
		}
		fail, err := strconv.ParseBool(r.URL.Query().Get("fail"))
		if err != nil {
			writeJSON(w, http.StatusBadRequest, errorBody{fmt.Sprintf("fail=%q: want fail=true or fail=false", r.URL.Query().Get("fail"))})
			return
		}
		if h.failing.Swap(fail) != fail && h.logf != nil {
			h.logf("result=health-switched healthy=%t", !fail)
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		writeJSON(w, http.StatusNotFound, errorBody{"no such endpoint: " + r.URL.Path})
	}
}

// serveHealth serves the health endpoint on addr until stop is called.
func serveHealth(addr string, logf func(format string, a ...any)) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health listen %s: %w", addr, err)
	}
	hs := &http.Server{Handler: &health{logf: logf}, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.Serve(l)
	}()
	logf("result=health-listening address=%s", l.Addr())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
		<-done
	}, nil
}

// runHealthCommand is `elector-demo health fail|pass [--addr host:port]`.
func runHealthCommand(ctx context.Context, args []string, e env, stdout, stderr io.Writer) int {
	fs, help := newFlagSet("elector-demo health", stderr)
	addr := fs.String("addr", defaultHealthAddr, "the demo's --health-listen address (env ELECTOR_DEMO_HEALTH_LISTEN)")
	var verb string
	if len(args) > 0 && (args[0] == "fail" || args[0] == "pass") {
		verb, args = args[0], args[1:]
	}
	if err := parseFlags(fs, help, args, map[string]string{"addr": "ELECTOR_DEMO_HEALTH_LISTEN"}, e); err != nil {
		return reportParse(err, stderr)
	}
	if verb == "" {
		return reportParse(usagef("health: want `elector-demo health fail` or `elector-demo health pass`"), stderr)
	}
	if _, _, err := net.SplitHostPort(*addr); err != nil {
		return reportParse(usagef("--addr %q: want host:port", *addr), stderr)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	url := fmt.Sprintf("http://%s/health?fail=%t", *addr, verb == "fail")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err == nil {
		var resp *http.Response
		if resp, err = http.DefaultClient.Do(req); err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusNoContent {
				err = fmt.Errorf("POST %s: %s %s", url, resp.Status, b)
			}
		}
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("POST %s: no answer in 5s", url)
		}
		fmt.Fprintf(stderr, "elector-demo health: %v\n", err)
		return exitRuntime
	}
	fmt.Fprintf(stdout, "health: %s\n", map[string]string{"fail": "failing", "pass": "healthy"}[verb])
	return exitOK
}
