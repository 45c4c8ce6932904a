// Package client is a Go client for elector-sidecar's local API, for the
// main container next to the sidecar: Leader (GET /leader), Token (GET
// /token), Release (POST /release) and Watch (GET /watch, falling back to
// the GET /leader long-poll, then to polling, on an older sidecar).
//
// Every answer that is not a success is a *StatusError carrying the HTTP
// status and the sidecar's JSON error message; errors.Is tells the cases
// apart: ErrNotLeader (GET /token's 409: another pod leads, or nobody does),
// ErrUnavailable (503: the Lease has not been observed yet, this pod cannot
// prove its term is safe, the election loop is not running, or too many
// watchers).
//
// The package imports no k8s.io module: the wire types are pkg/api's.
//
// A typical worker fences every write with the token it started with:
//
//	c, err := client.FromEnv() // $ELECTOR_URL, as the chart sets it; else http://127.0.0.1:4040
//	...
//	tok, err := c.Token(ctx)
//	if errors.Is(err, client.ErrNotLeader) {
//		return // a follower: nothing to do
//	}
//	...
//	err = fence.Do(ctx, resource, tok.Fencing(), holder, write)
//
// RunWhileLeading runs work under a context that ends when this pod's term
// does (client-go's OnStartedLeading). See Example for a complete program.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/api"
	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
)

// DefaultURL is the sidecar's local API in the default configuration.
const DefaultURL = api.DefaultURL

// Defaults of the options.
const (
	// DefaultTimeout bounds Leader, Token and Release (a POST /release may
	// take up to api.ReleaseTimeout on the sidecar).
	DefaultTimeout = api.ReleaseTimeout + 5*time.Second
	// DefaultLongPollWait is the wait= of each GET /leader long-poll
	// Watch makes when the sidecar has no /watch.
	DefaultLongPollWait = 30 * time.Second
	// DefaultPollInterval is how often Watch reads GET /leader when the
	// sidecar has neither /watch nor the long-poll.
	DefaultPollInterval = time.Second
	// DefaultIdleTimeout: a /watch stream that sends nothing (no event, no
	// heartbeat) for this long is dropped and reconnected. The sidecar
	// sends a heartbeat every api.DefaultHeartbeat.
	DefaultIdleTimeout = 3 * api.DefaultHeartbeat
)

// maxBody bounds the bytes read from one answer or one event.
const maxBody = 64 << 10

// Errors that errors.Is finds in the errors of this package.
var (
	// ErrNotLeader: GET /token answered 409, another pod leads or nobody
	// does (StatusError.Holder says who).
	ErrNotLeader = errors.New("not the leader")
	// ErrUnavailable: the sidecar answered 503 (not ready, cannot prove its
	// term is safe, its election loop is not running, or too many
	// watchers); retry later.
	ErrUnavailable = errors.New("sidecar unavailable")
	// ErrNoWatch: the sidecar has no GET /watch (an older version). Watch
	// reports it to the error handler once, then long-polls.
	ErrNoWatch = errors.New("the sidecar has no /watch")
)

// StatusError is an answer of the sidecar that is not a success.
type StatusError struct {
	// Method and Path are the request's ("GET", "/token").
	Method, Path string
	// StatusCode is the HTTP status (409, 503, ...).
	StatusCode int
	// Message is the sidecar's {"error": ...}; for a body that is not
	// that JSON, its first bytes.
	Message string
	// Holder is the Lease's holder in GET /token's 409 ("": nobody).
	Holder string
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("%s %s: %d %s", e.Method, e.Path, e.StatusCode, http.StatusText(e.StatusCode))
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if e.StatusCode == http.StatusConflict && e.Holder != "" {
		msg += " (holder " + e.Holder + ")"
	}
	return msg
}

// Is reports whether e is ErrNotLeader (a 409 of GET /token) or
// ErrUnavailable (a 503).
func (e *StatusError) Is(target error) bool {
	switch target {
	case ErrNotLeader:
		return e.StatusCode == http.StatusConflict && e.Path == "/token"
	case ErrUnavailable:
		return e.StatusCode == http.StatusServiceUnavailable
	}
	return false
}

// Token is GET /token's answer.
type Token struct {
	api.TokenResponse
	// Deadline is when the token stops being safe to use, at the earliest:
	// the instant the request was sent plus ExpiresInMs. It carries a
	// monotonic clock reading; check it with time.Until.
	Deadline time.Time
}

// Fencing is the token as pkg/fencing takes it: value and Lease UID.
func (t Token) Fencing() fencing.Token {
	return fencing.Token{Value: t.Token, LeaseUID: t.LeaseUID}
}

// Client calls one sidecar's local API. It is safe for concurrent use.
type Client struct {
	base         string
	http         *http.Client
	timeout      time.Duration
	longPollWait time.Duration
	pollInterval time.Duration
	idleTimeout  time.Duration
	backoff      Backoff
	onError      func(error)
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client (default: a client of its own with no
// overall Timeout). A Timeout on it also ends every /watch stream and
// long-poll after that long (Watch then reconnects); prefer 0, the calls
// have their own bounds (WithTimeout).
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.http = hc
		}
	}
}

// WithTimeout bounds each Leader, Token and Release call (default
// DefaultTimeout); d <= 0 keeps the default. The context's deadline, if
// earlier, wins.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.timeout = d
		}
	}
}

// WithBackoff sets the pause between Watch's reconnections (default
// DefaultBackoff). A zero Duration keeps the default.
func WithBackoff(b Backoff) Option {
	return func(c *Client) {
		if b.Duration > 0 {
			c.backoff = b
		}
	}
}

// WithLongPollWait sets the wait= of Watch's long-polls (default
// DefaultLongPollWait, at most api.MaxWait); d <= 0 keeps the default.
func WithLongPollWait(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.longPollWait = min(d, api.MaxWait)
		}
	}
}

// WithPollInterval sets how often Watch polls a sidecar that has neither
// /watch nor the long-poll (default DefaultPollInterval); d <= 0 keeps the
// default.
func WithPollInterval(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.pollInterval = d
		}
	}
}

// WithIdleTimeout sets how long a /watch stream may stay silent before
// Watch drops and reconnects it (default DefaultIdleTimeout); d <= 0 keeps
// the default.
func WithIdleTimeout(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.idleTimeout = d
		}
	}
}

// WithErrorHandler sets a function Watch calls with every error it
// recovers from (a dropped stream, a refused connection, a 503) before it
// reconnects, and once with an error matching ErrNoWatch when it falls back
// to long-polling. Default: none. It is called from the goroutine that reads
// the sidecar, which may run while fn runs.
func WithErrorHandler(f func(error)) Option {
	return func(c *Client) { c.onError = f }
}

// New returns a client of the local API at baseURL ("" is DefaultURL), an
// http or https URL with a host and no query.
func New(baseURL string, opts ...Option) (*Client, error) {
	if baseURL == "" {
		baseURL = DefaultURL
	}
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("sidecar URL %q: want a URL like %s", baseURL, DefaultURL)
	}
	c := &Client{
		base:         strings.TrimRight(baseURL, "/"),
		http:         &http.Client{},
		timeout:      DefaultTimeout,
		longPollWait: DefaultLongPollWait,
		pollInterval: DefaultPollInterval,
		idleTimeout:  DefaultIdleTimeout,
		backoff:      DefaultBackoff,
	}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// URL is the base URL of the sidecar's local API, without a trailing slash.
func (c *Client) URL() string { return c.base }

// Leader reads GET /leader: the election as this pod's sidecar sees it.
func (c *Client) Leader(ctx context.Context) (api.LeaderResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var r api.LeaderResponse
	resp, err := c.do(ctx, http.MethodGet, "/leader", "", nil)
	if err != nil {
		return r, err
	}
	defer func() { _ = resp.Body.Close() }()
	if err := checkStatus(resp, "/leader", http.StatusOK); err != nil {
		return r, err
	}
	return r, decode(resp, "/leader", &r)
}

// Token reads GET /token: the fencing token, while this pod leads and its
// term is safe. A follower gets an error matching ErrNotLeader; a sidecar
// that cannot vouch for a term yet one matching ErrUnavailable.
func (c *Client) Token(ctx context.Context) (Token, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var t Token
	sent := time.Now()
	resp, err := c.do(ctx, http.MethodGet, "/token", "", nil)
	if err != nil {
		return t, err
	}
	defer func() { _ = resp.Body.Close() }()
	if err := checkStatus(resp, "/token", http.StatusOK); err != nil {
		return t, err
	}
	if err := decode(resp, "/token", &t.TokenResponse); err != nil {
		return t, err
	}
	if t.Token <= 0 {
		return t, fmt.Errorf("GET /token: 200 without a token (token %d)", t.Token)
	}
	t.Deadline = sent.Add(time.Duration(t.ExpiresInMs) * time.Millisecond)
	return t, nil
}

// Release posts /release: this pod stops leading (its token stops at once)
// and frees the Lease; it stays a candidate. With d > 0 it posts
// /release?for=d instead: it also stays out of the election for d (at most
// api.MaxReleaseFor). A follower's release succeeds and changes
// nothing.
func (c *Client) Release(ctx context.Context, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("release for %v: must not be negative", d)
	}
	if d > api.MaxReleaseFor {
		return fmt.Errorf("release for %v: must be at most %v", d, api.MaxReleaseFor)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	query := ""
	if d > 0 {
		query = "for=" + url.QueryEscape(d.String())
	}
	resp, err := c.do(ctx, http.MethodPost, "/release", query, nil)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if err := checkStatus(resp, "/release", http.StatusNoContent, http.StatusOK); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
	return nil
}

// do sends one request; a transport error names the request.
func (c *Client) do(ctx context.Context, method, path, query string, header http.Header) (*http.Response, error) {
	u := c.base + path
	if query != "" {
		u += "?" + query
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Accept", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return resp, nil
}

// checkStatus returns a *StatusError unless resp's status is one of ok; it
// reads the body of an error answer. path is the API's ("/token").
func checkStatus(resp *http.Response, path string, ok ...int) error {
	for _, code := range ok {
		if resp.StatusCode == code {
			return nil
		}
	}
	e := &StatusError{Method: resp.Request.Method, Path: path, StatusCode: resp.StatusCode}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	var nl api.NotLeaderResponse
	if err := json.Unmarshal(body, &nl); err == nil && nl.Error != "" {
		e.Message, e.Holder = nl.Error, nl.Holder
	} else {
		e.Message = strings.TrimSpace(string(body[:min(len(body), 512)]))
	}
	return e
}

// decode reads resp's JSON body into v. path is the API's ("/token").
func decode(resp *http.Response, path string, v any) error {
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", resp.Request.Method, path, err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%s %s: the %d answer is not the expected JSON (%w): %q",
			resp.Request.Method, path, resp.StatusCode, err, body[:min(len(body), 200)])
	}
	return nil
}
