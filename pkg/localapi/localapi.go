// Package localapi serves the election's answer to the main container on a
// localhost HTTP port: /leader (also as a long-poll), /watch (a stream of
// server-sent events), /token, /release, /healthz, /readyz, /metrics.
//
// Every error is JSON ({"error": "..."}), a wrong method is 405 with an Allow
// header, an unknown path is 404, a bad or unknown query parameter is 400,
// a body over MaxRequestBodyBytes is 413.
// /token is served only while this process leads and its token is safe; see
// package election.
//
// A slow /watch reader: each change the stream's handler sees is written at
// once (changes it sees together are merged into one event with the latest
// state), so a reader that pauses finds every event written meanwhile queued
// in the socket buffers, oldest first, the latest last; only once those are
// full are further changes merged, and a reader that takes no write within
// the stream write timeout is dropped. An event's expiresInMs was true when
// it was written. A lost stream: Shutdown of NewServer's server ends every
// stream after its latest state and answers every waiting long-poll
// (CloseStreams); a stream that stalls or drops otherwise says nothing more,
// so a reader holds an isLeader:true for its expiresInMs from when it read
// it, and no longer (pkg/client's Watch does this, and reads all that is
// queued before it calls back).
package localapi

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/elector-sidecar/elector-sidecar/pkg/api"
	"github.com/elector-sidecar/elector-sidecar/pkg/election"
)

// Elector is what the API reads and controls; *election.Elector implements it.
type Elector interface {
	Status() election.Status
	// Changed returns a channel closed when Status may have changed
	// (including when the token's validity runs out with no Lease event).
	Changed() <-chan struct{}
	Release(ctx context.Context) error
	ReleaseFor(ctx context.Context, d time.Duration) error
	Alive() bool
}

var _ Elector = (*election.Elector)(nil)

// ReleaseTimeout bounds a POST /release.
const ReleaseTimeout = api.ReleaseTimeout

// Slow-client defences of NewServer's server and of the handler. A client
// that sends its headers slowly is cut off after ReadHeaderTimeout, one that
// sends its body slowly after ReadTimeout; an answer must be written within
// WriteTimeout (the push endpoints set their own deadlines instead, see
// DefaultStreamWriteTimeout); an idle keep-alive connection is closed after
// IdleTimeout. LimitListener caps the connections.
const (
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 10 * time.Second
	WriteTimeout      = 15 * time.Second
	IdleTimeout       = 120 * time.Second
	MaxHeaderBytes    = 16 << 10
	// MaxRequestBodyBytes caps a request's body: no endpoint takes one, and
	// POST /release ignores up to this much; a longer one is a 413.
	MaxRequestBodyBytes = 4 << 10
)

// Limits and defaults of the push endpoints and of POST /release?for=.
const (
	// MaxWait caps GET /leader?wait=; a longer wait is a 400.
	MaxWait = api.MaxWait
	// MaxReleaseFor caps POST /release?for=; a longer time out is a 400.
	MaxReleaseFor = api.MaxReleaseFor
	// DefaultHeartbeat is the interval of /watch's ": heartbeat" comments.
	DefaultHeartbeat = api.DefaultHeartbeat
	// DefaultMaxWaiters bounds the /watch streams and waiting long-polls
	// served at once; one more gets a 503 with Retry-After.
	DefaultMaxWaiters = 1024
	// DefaultStreamWriteTimeout bounds each write of a stream or long-poll
	// answer: a client that stops reading is dropped after it.
	DefaultStreamWriteTimeout = 15 * time.Second
)

type route struct {
	method  string // GET also answers HEAD
	handler http.HandlerFunc
}

// Handler is the local API.
type Handler struct {
	el     Elector
	routes map[string]route

	appHealth    func() bool
	clock        clock.WithTicker
	heartbeat    time.Duration
	maxWaiters   int64
	writeTimeout time.Duration
	waiters      atomic.Int64 // streams and long-polls being served
	etags        atomic.Pointer[etagCache]
	events       eventCache // the newest /watch event, shared by the streams
	// releases counts POST /release calls: the ETag of a "released for"
	// state covers it, so extending a time out changes the ETag.
	releases atomic.Int64
	// closing is closed by CloseStreams (on the server's Shutdown).
	closing   chan struct{}
	closeOnce sync.Once
	streams   streamSet // the streams on connections of their own (stream.go)
	shards    *shardAPI // WithShards: the set served instead of el
}

// Option configures a Handler.
type Option func(*Handler)

// WithAppHealth adds "appHealthy" (healthy()) to the /leader body; without
// it the field is absent. healthy must be cheap and safe for concurrent use
// (e.g. (*apphealth.Prober).Healthy). /watch and long-polls push a change of
// it when the election's state changes with it (the prober takes the pod
// out of the election or puts it back); its value is read at each answer.
func WithAppHealth(healthy func() bool) Option {
	return func(h *Handler) { h.appHealth = healthy }
}

// WithHeartbeat sets the interval of /watch's heartbeat comments (default
// DefaultHeartbeat); d <= 0 keeps the default.
func WithHeartbeat(d time.Duration) Option {
	return func(h *Handler) {
		if d > 0 {
			h.heartbeat = d
		}
	}
}

// WithMaxWaiters bounds the /watch streams plus waiting long-polls served
// at once (default DefaultMaxWaiters); n <= 0 keeps the default.
func WithMaxWaiters(n int) Option {
	return func(h *Handler) {
		if n > 0 {
			h.maxWaiters = int64(n)
		}
	}
}

// WithStreamWriteTimeout bounds each write to a /watch stream or a
// long-poll's answer (default DefaultStreamWriteTimeout); d <= 0 keeps the
// default.
func WithStreamWriteTimeout(d time.Duration) Option {
	return func(h *Handler) {
		if d > 0 {
			h.writeTimeout = d
		}
	}
}

// WithClock sets the clock of the long-poll's wait and the heartbeat (tests).
func WithClock(c clock.WithTicker) Option {
	return func(h *Handler) {
		if c != nil {
			h.clock = c
		}
	}
}

// NewHandler returns the local API for el; metrics serves /metrics (nil: 404).
func NewHandler(el Elector, metrics http.Handler, opts ...Option) *Handler {
	h := &Handler{
		el:           el,
		clock:        clock.RealClock{},
		heartbeat:    DefaultHeartbeat,
		maxWaiters:   DefaultMaxWaiters,
		writeTimeout: DefaultStreamWriteTimeout,
		closing:      make(chan struct{}),
	}
	for _, o := range opts {
		o(h)
	}
	h.routes = map[string]route{
		"/leader":  {http.MethodGet, h.leader},
		"/watch":   {http.MethodGet, h.watch},
		"/token":   {http.MethodGet, h.token},
		"/release": {http.MethodPost, h.release},
		"/healthz": {http.MethodGet, h.healthz},
		"/readyz":  {http.MethodGet, h.readyz},
	}
	if metrics != nil {
		h.routes["/metrics"] = route{http.MethodGet, metrics.ServeHTTP}
	}
	h.addShardRoutes() // shards.go
	return h
}

// MetricsOnly serves /metrics and nothing else, for a listener on the pod IP.
func MetricsOnly(metrics http.Handler) http.Handler {
	return &Handler{routes: map[string]route{"/metrics": {http.MethodGet, metrics.ServeHTTP}}}
}

// DiagnosticsPaths are the endpoints Diagnostics serves.
var DiagnosticsPaths = []string{"/healthz", "/readyz", "/metrics"}

// Diagnostics serves h's /healthz, /readyz and /metrics (the same handlers,
// so the same answers) and nothing else, for a listener on the pod IP: the
// kubelet's httpGet probes and Prometheus reach it, while /token, /release,
// /leader and /watch stay on the loopback API (404 here, with the same JSON
// error as an unknown path there).
func (h *Handler) Diagnostics() http.Handler {
	d := &Handler{routes: map[string]route{}}
	for _, p := range DiagnosticsPaths {
		if rt, ok := h.routes[p]; ok {
			d.routes[p] = rt
		}
	}
	return d
}

// Routes returns the paths h serves, each with its method (a GET path also
// answers HEAD). docs/openapi.yaml describes them (TestOpenAPIDescribesTheLocalAPI).
func (h *Handler) Routes() map[string]string {
	out := make(map[string]string, len(h.routes))
	for p, rt := range h.routes {
		out[p] = rt.method
	}
	return out
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt, ok := h.route(r.URL.Path)
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
	if r.ContentLength > MaxRequestBodyBytes {
		writeError(w, http.StatusRequestEntityTooLarge, tooLarge)
		return
	}
	rt.handler(w, r)
}

// tooLarge is the error of a 413.
var tooLarge = "request body too large (" + strconv.Itoa(MaxRequestBodyBytes) + " bytes at most; no endpoint takes a body)"

// NewServer returns a server (an http.Server) for addr with the
// slow-client timeouts (ReadHeaderTimeout, ...) and MaxHeaderBytes set;
// serve it on a LimitListener to cap the connections too. When h is a
// *Handler, the server's Shutdown calls its CloseStreams and waits for the
// streams on connections of their own (Server), so that Shutdown returns
// once the streams and long-polls have had their last answer instead of at
// its deadline.
func NewServer(addr string, h http.Handler) *Server {
	srv := &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
	}
	api, _ := h.(*Handler)
	if api != nil {
		srv.RegisterOnShutdown(api.CloseStreams)
	}
	return &Server{Server: srv, api: api}
}

func (h *Handler) leader(w http.ResponseWriter, r *http.Request) {
	wait, match, ok := waitQuery(w, r)
	if !ok {
		return
	}
	if wait > 0 && match != "" {
		h.longPoll(w, r, match, wait)
		return
	}
	v := h.view()
	h.answerLeader(w, &v, match)
}

// answerLeader writes GET /leader's answer for v: 304 if match (the
// If-None-Match header) matches its ETag, else the body.
func (h *Handler) answerLeader(w http.ResponseWriter, v *view, match string) {
	etag := h.etagHeader(v)
	hdr := w.Header()
	hdr["Etag"] = etag // what Set("ETag", ...) stores, without allocating
	hdr["Cache-Control"] = hdrNoStore
	if match != "" && etagMatches(match, etag[0]) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	buf := getBody()
	*buf = append(v.appendJSON(*buf), '\n')
	writeJSON(w, http.StatusOK, *buf)
	putBody(buf)
}

func (h *Handler) token(w http.ResponseWriter, r *http.Request) {
	s := h.el.Status()
	w.Header()["Cache-Control"] = hdrNoStore
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
		writeJSON(w, http.StatusConflict, append(resp.AppendJSON(make([]byte, 0, 128)), '\n'))
		return
	}
	buf := getBody()
	defer putBody(buf)
	if wantsText(r.Header.Get("Accept")) {
		w.Header()["Content-Type"] = hdrText
		w.WriteHeader(http.StatusOK)
		*buf = strconv.AppendInt(*buf, s.Token, 10)
		_, _ = w.Write(*buf)
		return
	}
	resp := newTokenResponse(&s)
	*buf = append(resp.AppendJSON(*buf), '\n')
	writeJSON(w, http.StatusOK, *buf)
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
	healthOK    = append((&HealthResponse{Status: "ok"}).AppendJSON(nil), '\n')
	healthReady = append((&HealthResponse{Status: "ready"}).AppendJSON(nil), '\n')
)

// view is what GET /leader and /watch serve, read at one instant.
type view struct {
	s   election.Status
	app appState
	// releases is the count of POST /release calls, read after s.
	releases int64
}

func (h *Handler) view() view {
	v := view{s: h.el.Status()}
	v.releases = h.releases.Load()
	if h.appHealth != nil {
		v.app = appUnhealthy
		if h.appHealth() {
			v.app = appHealthy
		}
	}
	return v
}

func (v *view) etag() string { return leaderETag(&v.s, v.app, v.releases) }

func (v *view) appendJSON(b []byte) []byte {
	r := newLeaderResponse(&v.s, v.app)
	return r.AppendJSON(b)
}
