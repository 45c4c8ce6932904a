// Package localapi serves the election's answer to the main container on a
// localhost HTTP port: /leader, /token, /release, /healthz, /readyz, /metrics.
//
// Every error is JSON ({"error": "..."}), a wrong method is 405 with an Allow
// header, an unknown path is 404. /token is served only while this process
// leads and its token is safe; see package election.
package localapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
)

// Elector is what the API reads and controls; *election.Elector implements it.
type Elector interface {
	Status() election.Status
	Release(ctx context.Context) error
	Alive() bool
}

// ReleaseTimeout bounds a POST /release.
const ReleaseTimeout = 10 * time.Second

type route struct {
	method  string // GET also answers HEAD
	handler http.HandlerFunc
}

// Handler is the local API.
type Handler struct {
	el     Elector
	routes map[string]route
}

// NewHandler returns the local API for el; metrics serves /metrics (nil: 404).
func NewHandler(el Elector, metrics http.Handler) *Handler {
	h := &Handler{el: el}
	h.routes = map[string]route{
		"/leader":  {http.MethodGet, h.leader},
		"/token":   {http.MethodGet, h.token},
		"/release": {http.MethodPost, h.release},
		"/healthz": {http.MethodGet, h.healthz},
		"/readyz":  {http.MethodGet, h.readyz},
	}
	if metrics != nil {
		h.routes["/metrics"] = route{http.MethodGet, metrics.ServeHTTP}
	}
	return h
}

// MetricsOnly serves /metrics and nothing else, for a listener on the pod IP.
func MetricsOnly(metrics http.Handler) http.Handler {
	return &Handler{routes: map[string]route{"/metrics": {http.MethodGet, metrics.ServeHTTP}}}
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt, ok := h.routes[r.URL.Path]
	if !ok {
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.URL.Path)
		return
	}
	if r.Method != rt.method && !(rt.method == http.MethodGet && r.Method == http.MethodHead) {
		allow := rt.method
		if rt.method == http.MethodGet {
			allow += ", " + http.MethodHead
		}
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed on "+r.URL.Path+"; use "+rt.method)
		return
	}
	rt.handler(w, r)
}

// NewServer returns an http.Server with timeouts set for addr.
func NewServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
}

func (h *Handler) leader(w http.ResponseWriter, r *http.Request) {
	s := h.el.Status()
	etag := leaderETag(&s)
	hdr := w.Header()
	hdr.Set("ETag", etag)
	hdr.Set("Cache-Control", "no-store")
	if match := r.Header.Get("If-None-Match"); match != "" && etagMatches(match, etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	resp := newLeaderResponse(&s)
	writeJSON(w, http.StatusOK, append(resp.appendJSON(make([]byte, 0, 256)), '\n'))
}

func (h *Handler) token(w http.ResponseWriter, r *http.Request) {
	s := h.el.Status()
	w.Header().Set("Cache-Control", "no-store")
	switch {
	case s.IsLeader:
	case !s.Ready:
		writeError(w, http.StatusServiceUnavailable, "the lease has not been observed yet (is the API server reachable?)")
		return
	case s.HoldsLease:
		writeError(w, http.StatusServiceUnavailable, "this pod holds the lease but cannot prove its term is still safe")
		return
	default:
		msg := "not the leader"
		if s.Holder == "" {
			msg = "not the leader: nobody holds the lease"
		}
		resp := NotLeaderResponse{Error: msg, Holder: s.Holder}
		writeJSON(w, http.StatusConflict, append(resp.appendJSON(make([]byte, 0, 128)), '\n'))
		return
	}
	if wantsText(r.Header.Get("Accept")) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(strconv.AppendInt(make([]byte, 0, 24), s.Token, 10))
		return
	}
	resp := newTokenResponse(&s)
	writeJSON(w, http.StatusOK, append(resp.appendJSON(make([]byte, 0, 160)), '\n'))
}

func (h *Handler) release(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), ReleaseTimeout)
	defer cancel()
	err := h.el.Release(ctx)
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, election.ErrNotRunning):
		writeError(w, http.StatusServiceUnavailable, err.Error())
	case errors.Is(err, election.ErrReleaseNotProcessed):
		// The loop never took the request: nothing changed; a leader still
		// leads with the same token.
		writeError(w, http.StatusServiceUnavailable, err.Error()+": the election loop did not take the request in time; nothing changed, the token is unchanged")
	case errors.Is(err, election.ErrReleaseUnconfirmed):
		// The loop took it (a leader's token has stopped) but the Lease write
		// did not finish in time; it may still succeed or fail.
		writeError(w, http.StatusGatewayTimeout, err.Error()+": the election loop took the request (a leader's token has stopped), but writing the lease free did not finish in time; followers take over at the latest when the lease expires")
	default:
		// The token stopped before the write; the Lease expires by itself.
		writeError(w, http.StatusBadGateway, "stepped down, but writing the lease free failed: "+err.Error())
	}
}

func (h *Handler) healthz(w http.ResponseWriter, _ *http.Request) {
	if !h.el.Alive() {
		writeError(w, http.StatusServiceUnavailable, "election loop is not running")
		return
	}
	writeJSON(w, http.StatusOK, healthOK)
}

func (h *Handler) readyz(w http.ResponseWriter, _ *http.Request) {
	if !h.el.Alive() {
		writeError(w, http.StatusServiceUnavailable, "election loop is not running")
		return
	}
	if !h.el.Status().Ready {
		writeError(w, http.StatusServiceUnavailable, "the lease has not been observed yet")
		return
	}
	writeJSON(w, http.StatusOK, healthReady)
}

// The constant bodies of /healthz and /readyz.
var (
	healthOK    = append((&HealthResponse{Status: "ok"}).appendJSON(nil), '\n')
	healthReady = append((&HealthResponse{Status: "ready"}).appendJSON(nil), '\n')
)

// leaderETag changes whenever the /leader body would change, except for
// expiresInMs counting down between renewals: it covers isLeader, holder,
// identity, lease, leaseTransitions, ready, the token, and ValidUntil (the
// instant the token stops, which moves with every renew, when expiresInMs
// jumps). Numbers are kept verbatim; the strings go through an inline
// FNV-1a, so the only allocation is the returned string.
func leaderETag(s *election.Status) string {
	var buf [96]byte
	b := append(buf[:0], '"')
	if s.IsLeader {
		b = append(b, 'L')
	} else {
		b = append(b, 'F')
	}
	if s.Ready {
		b = append(b, 'R')
	} else {
		b = append(b, 'N')
	}
	b = strconv.AppendInt(b, s.LeaseTransitions, 36)
	b = append(b, '.')
	b = strconv.AppendInt(b, s.Token, 36)
	b = append(b, '.')
	var until int64
	if !s.ValidUntil.IsZero() {
		until = s.ValidUntil.UnixNano()
	}
	b = strconv.AppendInt(b, until, 36)
	b = append(b, '.')
	h := uint64(fnvOffset64)
	h = fnvString(h, s.Holder)
	h = fnvString(h, s.Identity)
	h = fnvString(h, s.Lease)
	b = strconv.AppendUint(b, h, 36)
	b = append(b, '"')
	return string(b)
}

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// fnvString hashes s into h (FNV-1a), then its length, so that field
// boundaries count ("ab","c" differs from "a","bc").
func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime64
	}
	for n := uint64(len(s)); ; n >>= 8 {
		h ^= n & 0xff
		h *= fnvPrime64
		if n < 0x100 {
			break
		}
	}
	return h
}

// etagMatches reports whether the If-None-Match header matches etag (weak
// comparison, as RFC 9110 asks for If-None-Match).
func etagMatches(header, etag string) bool {
	for header != "" {
		var t string
		t, header, _ = strings.Cut(header, ",")
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == etag {
			return true
		}
	}
	return false
}

// wantsText reports whether the client asked for text/plain over JSON.
func wantsText(accept string) bool {
	if accept == "" {
		return false
	}
	for _, part := range strings.Split(accept, ",") {
		mt, _, _ := strings.Cut(strings.TrimSpace(part), ";")
		switch strings.ToLower(strings.TrimSpace(mt)) {
		case "text/plain":
			return true
		case "application/json", "*/*", "application/*":
			return false
		}
	}
	return false
}

func writeJSON(w http.ResponseWriter, code int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// writeError writes {"error": msg}.
func writeError(w http.ResponseWriter, code int, msg string) {
	resp := ErrorResponse{Error: msg}
	writeJSON(w, code, append(resp.appendJSON(make([]byte, 0, 128)), '\n'))
}
