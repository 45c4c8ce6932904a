// Package httpstore is a fenced resource behind HTTP: a server that accepts a
// write only with a fencing token at least as high as the highest it has
// accepted (pkg/fencing), and a client for it. The integration tests, the
// chaos soak and the demo (`elector-demo store`) use it as the "real
// resource" a leader writes to.
//
// Protocol:
//
//	PUT /value   header X-Fencing-Token: <token>, optional X-Fencing-Lease-UID: <leaseUID from /token>,
//	             optional X-Writer: <name>, body = the value
//	             200 {"accepted":true,"token":N,"leaseUID":"...","highest":N,"highestLeaseUID":"..."}
//	             409 {"error":"stale fencing token ...","token":N,"leaseUID":"...","highest":H,"highestLeaseUID":"..."}
//	             400 {"error":"..."} for a missing or malformed token
//	GET  /value  200 {"highest":H,"highestLeaseUID":"...","value":"..."}
//
// The server applies fencing.CheckToken: with a Lease UID, a token whose
// value equals the highest accepted but that was issued under another Lease
// is rejected (409). A client that sends no X-Fencing-Lease-UID (older
// clients, Client.Write) gets the value-only rule; the UID fields of the
// answers are left out when empty, and a client that does not know them
// ignores them.
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
	TokenHeader    = "X-Fencing-Token"
	LeaseUIDHeader = "X-Fencing-Lease-UID"
	WriterHeader   = "X-Writer"
)

// MaxValueBytes bounds a PUT body.
const MaxValueBytes = 1 << 20

// Write is one PUT /value as the server saw it.
type Write struct {
	// Seq orders accepted writes by commit (1, 2, ...); 0 for rejected writes.
	Seq    int64
	At     time.Time
	Writer string
	Token  int64
	// LeaseUID is the token's Lease UID ("" if the writer sent none).
	LeaseUID string
	Value    []byte
	Accepted bool
	// Highest is the highest token accepted so far (after this write if
	// accepted), HighestLeaseUID the Lease UID recorded with it.
	Highest         int64
	HighestLeaseUID string
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

func (r *recorder) Commit(ctx context.Context, version string, token fencing.Token, value []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.Store.Commit(ctx, version, token, value); err != nil {
		return err
	}
	r.seq++
	if c, ok := ctx.Value(commitKey{}).(*commit); ok {
		c.seq, c.token = r.seq, token
	}
	return nil
}

// commit is what the recorder tells WriteToken about its successful commit.
type commit struct {
	seq   int64
	token fencing.Token // as recorded (Fence.WriteToken keeps a known UID for an equal value)
}

type commitKey struct{}

// Write applies a fenced write without a Lease UID directly (PUT /value
// without X-Fencing-Lease-UID).
func (s *Server) Write(ctx context.Context, writer string, token int64, value []byte) Write {
	return s.WriteToken(ctx, writer, fencing.Token{Value: token}, value)
}

// WriteToken applies a fenced write directly (what PUT /value does).
func (s *Server) WriteToken(ctx context.Context, writer string, token fencing.Token, value []byte) Write {
	var c commit
	err := s.fence.WriteToken(context.WithValue(ctx, commitKey{}, &c), token, value)
	w := Write{At: time.Now(), Writer: writer, Token: token.Value, LeaseUID: token.LeaseUID, Value: value, Accepted: err == nil, Seq: c.seq}
	if err != nil {
		w.Err = err.Error()
		w.Stale = errors.Is(err, fencing.ErrStaleToken)
	}
	var ste *fencing.StaleTokenError
	switch {
	case err == nil:
		w.Highest, w.HighestLeaseUID = c.token.Value, c.token.LeaseUID // what the commit recorded
	case errors.As(err, &ste):
		w.Highest, w.HighestLeaseUID = ste.Highest, ste.HighestLeaseUID
	default:
		if h, _, _, lerr := s.rec.Load(ctx); lerr == nil {
			w.Highest, w.HighestLeaseUID = h.Value, h.LeaseUID
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

// Read returns the highest accepted token's value and the current value.
func (s *Server) Read(ctx context.Context) (int64, []byte, error) {
	h, v, err := s.ReadToken(ctx)
	return h.Value, v, err
}

// ReadToken returns the highest accepted token, with its Lease UID, and the
// current value.
func (s *Server) ReadToken(ctx context.Context) (fencing.Token, []byte, error) {
	h, v, _, err := s.rec.Load(ctx)
	return h, v, err
}

type writeResponse struct {
	Accepted        bool   `json:"accepted,omitempty"`
	Error           string `json:"error,omitempty"`
	Token           int64  `json:"token"`
	LeaseUID        string `json:"leaseUID,omitempty"`
	Highest         int64  `json:"highest"`
	HighestLeaseUID string `json:"highestLeaseUID,omitempty"`
}

type readResponse struct {
	Highest         int64  `json:"highest"`
	HighestLeaseUID string `json:"highestLeaseUID,omitempty"`
	Value           string `json:"value"`
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/value" {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "not found: " + r.URL.Path})
		return
	}
	switch r.Method {
	case http.MethodGet:
		h, v, err := s.ReadToken(r.Context())
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, readResponse{Highest: h.Value, HighestLeaseUID: h.LeaseUID, Value: string(v)})
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
		uid := strings.TrimSpace(r.Header.Get(LeaseUIDHeader)) // "" (absent): value-only rule
		res := s.WriteToken(r.Context(), r.Header.Get(WriterHeader), fencing.Token{Value: token, LeaseUID: uid}, body)
		resp := writeResponse{Error: res.Err, Token: token, LeaseUID: uid, Highest: res.Highest, HighestLeaseUID: res.HighestLeaseUID}
		switch {
		case res.Accepted:
			resp.Accepted = true
			writeJSON(w, http.StatusOK, resp)
		case res.Stale:
			writeJSON(w, http.StatusConflict, resp)
		default:
			writeJSON(w, http.StatusInternalServerError, resp)
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

// Write PUTs value with token and no Lease UID (the value-only rule): it is
// WriteToken(ctx, fencing.Token{Value: token}, value).
func (c *Client) Write(ctx context.Context, token int64, value []byte) error {
	return c.WriteToken(ctx, fencing.Token{Value: token}, value)
}

// WriteToken PUTs value with token and its Lease UID (sent if not empty). It
// returns nil if the store accepted it, a *fencing.StaleTokenError
// (errors.Is(err, fencing.ErrStaleToken)) if the store rejected the token,
// and another error otherwise.
func (c *Client) WriteToken(ctx context.Context, tok fencing.Token, value []byte) error {
	token := tok.Value
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.BaseURL+"/value", strings.NewReader(string(value)))
	if err != nil {
		return err
	}
	req.Header.Set(TokenHeader, strconv.FormatInt(token, 10))
	if tok.LeaseUID != "" {
		req.Header.Set(LeaseUIDHeader, tok.LeaseUID)
	}
	if c.Writer != "" {
		req.Header.Set(WriterHeader, c.Writer)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("fenced write with token %d: %w", token, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var body writeResponse
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = json.Unmarshal(raw, &body)
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusConflict:
		return &fencing.StaleTokenError{Token: token, Highest: body.Highest, LeaseUID: tok.LeaseUID, HighestLeaseUID: body.HighestLeaseUID}
	default:
		msg := body.Error
		if msg == "" {
			msg = strings.TrimSpace(string(raw))
		}
		return fmt.Errorf("fenced write with token %d: status %d: %s", token, resp.StatusCode, msg)
	}
}

// Read returns the store's highest accepted token value and its value.
func (c *Client) Read(ctx context.Context) (int64, []byte, error) {
	h, v, err := c.ReadToken(ctx)
	return h.Value, v, err
}

// ReadToken returns the store's highest accepted token, with its Lease UID
// ("" if unknown, or from a server that does not report it), and its value.
func (c *Client) ReadToken(ctx context.Context) (fencing.Token, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+"/value", nil)
	if err != nil {
		return fencing.Token{}, nil, err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fencing.Token{}, nil, fmt.Errorf("fenced read: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fencing.Token{}, nil, fmt.Errorf("fenced read: status %d: %s", resp.StatusCode, b)
	}
	var body readResponse
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fencing.Token{}, nil, fmt.Errorf("fenced read: %w", err)
	}
	return fencing.Token{Value: body.Highest, LeaseUID: body.HighestLeaseUID}, []byte(body.Value), nil
}
