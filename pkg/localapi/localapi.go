// Package localapi serves the election's answer to the main container on a
// localhost HTTP port: /leader, /token, /release, /healthz, /readyz, /metrics.
//
// Every error is JSON ({"error": "..."}), a wrong method is 405 with an Allow
// header, an unknown path is 404. /token is served only while this process
// leads and its token is safe; see package election.
package localapi

import (
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

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
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.URL.Path, nil)
		return
	}
	if r.Method != rt.method && !(rt.method == http.MethodGet && r.Method == http.MethodHead) {
		allow := rt.method
		if rt.method == http.MethodGet {
			allow += ", " + http.MethodHead
		}
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed on "+r.URL.Path+"; use "+rt.method, nil)
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
	etag := leaderETag(s)
	hdr := w.Header()
	hdr.Set("ETag", etag)
	hdr.Set("Cache-Control", "no-store")
	if match := r.Header.Get("If-None-Match"); match != "" && etagMatches(match, etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	b := make([]byte, 0, 256)
	b = append(b, `{"isLeader":`...)
	b = strconv.AppendBool(b, s.IsLeader)
	b = append(b, `,"holder":`...)
	b = appendString(b, s.Holder)
	b = append(b, `,"identity":`...)
	b = appendString(b, s.Identity)
	b = append(b, `,"lease":`...)
	b = appendString(b, s.Lease)
	b = append(b, `,"leaseTransitions":`...)
	b = strconv.AppendInt(b, s.LeaseTransitions, 10)
	b = append(b, `,"ready":`...)
	b = strconv.AppendBool(b, s.Ready)
	if s.IsLeader {
		b = append(b, `,"token":`...)
		b = strconv.AppendInt(b, s.Token, 10)
		b = append(b, `,"expiresInMs":`...)
		b = strconv.AppendInt(b, s.ExpiresIn.Milliseconds(), 10)
	}
	b = append(b, "}\n"...)
	writeJSON(w, http.StatusOK, b)
}

func (h *Handler) token(w http.ResponseWriter, r *http.Request) {
	s := h.el.Status()
	w.Header().Set("Cache-Control", "no-store")
	switch {
	case s.IsLeader:
	case !s.Ready:
		writeError(w, http.StatusServiceUnavailable, "the lease has not been observed yet (is the API server reachable?)", nil)
		return
	case s.HoldsLease:
		writeError(w, http.StatusServiceUnavailable, "this pod holds the lease but cannot prove its term is still safe", nil)
		return
	default:
		msg := "not the leader"
		if s.Holder == "" {
			msg = "not the leader: nobody holds the lease"
		}
		writeError(w, http.StatusConflict, msg, &s.Holder)
		return
	}
	if wantsText(r.Header.Get("Accept")) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(strconv.AppendInt(make([]byte, 0, 24), s.Token, 10))
		return
	}
	b := make([]byte, 0, 160)
	b = append(b, `{"token":`...)
	b = strconv.AppendInt(b, s.Token, 10)
	b = append(b, `,"lease":`...)
	b = appendString(b, s.Lease)
	b = append(b, `,"leaseUID":`...)
	b = appendString(b, s.LeaseUID)
	b = append(b, `,"expiresInMs":`...)
	b = strconv.AppendInt(b, s.ExpiresIn.Milliseconds(), 10)
	b = append(b, "}\n"...)
	writeJSON(w, http.StatusOK, b)
}

func (h *Handler) release(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), ReleaseTimeout)
	defer cancel()
	err := h.el.Release(ctx)
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, election.ErrNotRunning):
		writeError(w, http.StatusServiceUnavailable, err.Error(), nil)
	default:
		// The token stopped before the write; the Lease expires by itself.
		writeError(w, http.StatusBadGateway, "stepped down, but writing the lease free failed: "+err.Error(), nil)
	}
}

func (h *Handler) healthz(w http.ResponseWriter, _ *http.Request) {
	if !h.el.Alive() {
		writeError(w, http.StatusServiceUnavailable, "election loop is not running", nil)
		return
	}
	writeJSON(w, http.StatusOK, []byte("{\"status\":\"ok\"}\n"))
}

func (h *Handler) readyz(w http.ResponseWriter, _ *http.Request) {
	if !h.el.Alive() {
		writeError(w, http.StatusServiceUnavailable, "election loop is not running", nil)
		return
	}
	if !h.el.Status().Ready {
		writeError(w, http.StatusServiceUnavailable, "the lease has not been observed yet", nil)
		return
	}
	writeJSON(w, http.StatusOK, []byte("{\"status\":\"ready\"}\n"))
}

// leaderETag changes exactly when leadership (who holds the Lease, whether
// this pod leads) or the token changes.
func leaderETag(s election.Status) string {
	f := fnv.New64a()
	_, _ = f.Write([]byte(s.Holder))
	b := make([]byte, 0, 48)
	b = append(b, '"')
	if s.IsLeader {
		b = append(b, 'L')
	} else {
		b = append(b, 'F')
	}
	b = strconv.AppendInt(b, s.Token, 10)
	b = append(b, '-')
	b = strconv.AppendUint(b, f.Sum64(), 36)
	b = append(b, '"')
	return string(b)
}

func etagMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
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

// writeError writes {"error": msg} and, when holder is set, the holder.
func writeError(w http.ResponseWriter, code int, msg string, holder *string) {
	b := make([]byte, 0, 128)
	b = append(b, `{"error":`...)
	b = appendString(b, msg)
	if holder != nil {
		b = append(b, `,"holder":`...)
		b = appendString(b, *holder)
	}
	b = append(b, "}\n"...)
	writeJSON(w, code, b)
}

// appendString appends s as a JSON string: plain printable ASCII is copied,
// anything else goes through encoding/json.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
