// Package httpstore is a fenced resource behind HTTP: a server that accepts a
// write only with a fencing token at least as high as the highest it has
// accepted (pkg/fencing), and a client for it. The integration tests, the
// chaos soak and the demo (`elector-demo store`) use it as the "real
// resource" a leader writes to.
//
// Protocol:
//
//	PUT /value   header X-Fencing-Token: <token>, optional X-Writer: <name>, body = the value
//	             200 {"accepted":true,"token":N,"highest":N}
//	             409 {"error":"stale fencing token ...","token":N,"highest":H}
//	             400 {"error":"..."} for a missing or malformed token
//	GET  /value  200 {"highest":H,"value":"...","writer":"..."}
package httpstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
)

// Header names.
const (
	TokenHeader  = "X-Fencing-Token"
	WriterHeader = "X-Writer"
)

// MaxValueBytes bounds a PUT body.
const MaxValueBytes = 1 << 20

// Write is one PUT /value as the server saw it.
type Write struct {
	// Seq orders accepted writes by commit (1, 2, ...); 0 for rejected writes.
	Seq      int64
	At       time.Time
	Writer   string
	Token    int64
	Value    []byte
	Accepted bool
	// Highest is the highest token accepted so far (after this write if accepted).
	Highest int64
	// Err is why the write was rejected ("" if accepted).
	Err   string
	Stale bool
}

// Server is the fenced HTTP store. Create it with NewServer.
type Server struct {
	fence *fencing.Fence
	rec   *recorder
	// OnWrite, if set, is called after every write (in the request's goroutine).
	OnWrite func(Write)

	mu      sync.Mutex
	writes  []Write
	keepLog bool
}

// NewServer returns a server over store (nil: fencing.NewMemory()). It keeps a
// log of every write for inspection; see KeepLog.
func NewServer(store fencing.Store) *Server {
	if store == nil {
		store = fencing.NewMemory()
	}
	rec := &recorder{Store: store}
	return &Server{fence: fencing.New(rec), rec: rec, keepLog: true}
}

// KeepLog turns the in-memory write log on or off (on by default; a
// long-running demo store turns it off).
func (s *Server) KeepLog(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keepLog = on
}

// recorder numbers successful commits in commit order.
type recorder struct {
	fencing.Store
	mu  sync.Mutex
	seq int64
}

func (r *recorder) Commit(ctx context.Context, version string, token int64, value []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.Store.Commit(ctx, version, token, value); err != nil {
		return err
	}
	r.seq++
	if v, ok := ctx.Value(seqKey{}).(*int64); ok {
		*v = r.seq
	}
	return nil
}

type seqKey struct{}

// Write applies a fenced write directly (what PUT /value does).
func (s *Server) Write(ctx context.Context, writer string, token int64, value []byte) Write {
	var seq int64
	err := s.fence.Write(context.WithValue(ctx, seqKey{}, &seq), token, value)
	w := Write{At: time.Now(), Writer: writer, Token: token, Value: value, Accepted: err == nil, Seq: seq}
	if err != nil {
		w.Err = err.Error()
		w.Stale = errors.Is(err, fencing.ErrStaleToken)
	}
	var ste *fencing.StaleTokenError
	switch {
	case err == nil:
		w.Highest = token // what the commit recorded
	case errors.As(err, &ste):
		w.Highest = ste.Highest
	default:
		if h, _, _, lerr := s.rec.Load(ctx); lerr == nil {
			w.Highest = h
		}
	}
	s.mu.Lock()
	if s.keepLog {
		s.writes = append(s.writes, w)
	}
	s.mu.Unlock()
	if s.OnWrite != nil {
		s.OnWrite(w)
	}
	return w
}

// Writes returns the log of writes in the order their requests finished.
func (s *Server) Writes() []Write {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Write(nil), s.writes...)
}

// Read returns the highest accepted token and the current value.
func (s *Server) Read(ctx context.Context) (int64, []byte, error) {
	h, v, _, err := s.rec.Load(ctx)
	return h, v, err
}

type writeResponse struct {
	Accepted bool   `json:"accepted,omitempty"`
	Error    string `json:"error,omitempty"`
	Token    int64  `json:"token"`
	Highest  int64  `json:"highest"`
}

type readResponse struct {
	Highest int64  `json:"highest"`
	Value   string `json:"value"`
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/value" {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "not found: " + r.URL.Path})
		return
	}
	switch r.Method {
	case http.MethodGet:
		h, v, err := s.Read(r.Context())
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, readResponse{Highest: h, Value: string(v)})
	case http.MethodPut:
		raw := strings.TrimSpace(r.Header.Get(TokenHeader))
		token, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || token < 0 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("header %s must be a non-negative integer, got %q", TokenHeader, raw)})
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, MaxValueBytes+1))
		if err != nil || len(body) > MaxValueBytes {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("body unreadable or larger than %d bytes", MaxValueBytes)})
			return
		}
		res := s.Write(r.Context(), r.Header.Get(WriterHeader), token, body)
		switch {
		case res.Accepted:
			writeJSON(w, http.StatusOK, writeResponse{Accepted: true, Token: token, Highest: res.Highest})
		case res.Stale:
			writeJSON(w, http.StatusConflict, writeResponse{Error: res.Err, Token: token, Highest: res.Highest})
		default:
			writeJSON(w, http.StatusInternalServerError, writeResponse{Error: res.Err, Token: token, Highest: res.Highest})
		}
	default:
		w.Header().Set("Allow", "GET, PUT")
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method not allowed: " + r.Method})
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Listen serves s on addr (e.g. 127.0.0.1:0) in the background and returns
// the base URL and a function that shuts the listener down.
func Listen(addr string, s *Server) (string, func(), error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("fenced store: listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
	return "http://" + l.Addr().String(), stop, nil
}

// Client writes to and reads from a fenced HTTP store.
type Client struct {
	BaseURL string
	// Writer is sent as X-Writer (optional).
	Writer string
	HTTP   *http.Client
}

// NewClient returns a client for baseURL (e.g. http://127.0.0.1:7070).
func NewClient(baseURL, writer string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Writer: writer, HTTP: &http.Client{Timeout: 5 * time.Second}}
}

// Write PUTs value with token. It returns nil if the store accepted it, a
// *fencing.StaleTokenError (errors.Is(err, fencing.ErrStaleToken)) if the
// store rejected the token, and another error otherwise.
func (c *Client) Write(ctx context.Context, token int64, value []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.BaseURL+"/value", strings.NewReader(string(value)))
	if err != nil {
		return err
	}
	req.Header.Set(TokenHeader, strconv.FormatInt(token, 10))
	if c.Writer != "" {
		req.Header.Set(WriterHeader, c.Writer)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("fenced write with token %d: %w", token, err)
	}
	defer resp.Body.Close()
	var body writeResponse
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = json.Unmarshal(raw, &body)
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusConflict:
		return &fencing.StaleTokenError{Token: token, Highest: body.Highest}
	default:
		msg := body.Error
		if msg == "" {
			msg = strings.TrimSpace(string(raw))
		}
		return fmt.Errorf("fenced write with token %d: status %d: %s", token, resp.StatusCode, msg)
	}
}

// Read returns the store's highest accepted token and its value.
func (c *Client) Read(ctx context.Context) (int64, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+"/value", nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("fenced read: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return 0, nil, fmt.Errorf("fenced read: status %d: %s", resp.StatusCode, b)
	}
	var body readResponse
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, nil, fmt.Errorf("fenced read: %w", err)
	}
	return body.Highest, []byte(body.Value), nil
}
