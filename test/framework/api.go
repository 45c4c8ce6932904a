package framework

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/localapi"
)

// LeaderStatus is the body of GET /leader.
type LeaderStatus = localapi.LeaderResponse

// TokenResult is one GET /token call as seen by the caller: the status code
// (0 if the request failed), the decoded body (a localapi.TokenResponse on
// 200, else a localapi.NotLeaderResponse), and the caller's monotonic
// timestamps just before sending and just after the response arrived.
type TokenResult struct {
	Status int
	// From the localapi.TokenResponse (200).
	Token       int64
	Lease       string
	LeaseUID    string
	ExpiresInMs int64
	// From the localapi.NotLeaderResponse (409; 503 has no Holder).
	Error  string
	Holder string

	Sent     time.Time
	Received time.Time
	// Err is a transport or decoding error (connection refused, timeout, bad JSON).
	Err error
}

// Valid reports whether the call returned a token (HTTP 200 with a body).
func (r TokenResult) Valid() bool { return r.Err == nil && r.Status == http.StatusOK }

func (r TokenResult) String() string {
	switch {
	case r.Err != nil:
		return "error: " + r.Err.Error()
	case r.Valid():
		return fmt.Sprintf("200 token=%d expiresInMs=%d", r.Token, r.ExpiresInMs)
	default:
		return fmt.Sprintf("%d %s holder=%q", r.Status, r.Error, r.Holder)
	}
}

// APIClient talks to one process's local API (elector-sidecar, or the
// client-go candidate, which serves the same /leader and /token).
type APIClient struct {
	BaseURL string
	HTTP    *http.Client
}

// DefaultAPITimeout bounds one local-API call.
const DefaultAPITimeout = 2 * time.Second

// NewAPIClient returns a client for baseURL (e.g. http://127.0.0.1:4040) with
// its own keep-alive transport, so one slow target never delays another.
func NewAPIClient(baseURL string) *APIClient {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: time.Second}).DialContext,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
	}
	return &APIClient{BaseURL: baseURL, HTTP: &http.Client{Transport: tr, Timeout: DefaultAPITimeout}}
}

// Close drops idle connections.
func (c *APIClient) Close() {
	if tr, ok := c.HTTP.Transport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
}

// Token calls GET /token.
func (c *APIClient) Token(ctx context.Context) TokenResult {
	var r TokenResult
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+"/token", nil)
	if err != nil {
		r.Err = err
		return r
	}
	req.Header.Set("Accept", "application/json")
	r.Sent = time.Now()
	resp, err := c.HTTP.Do(req)
	if err != nil {
		r.Received = time.Now()
		r.Err = err
		return r
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	r.Received = time.Now()
	r.Status = resp.StatusCode
	if err != nil {
		r.Err = fmt.Errorf("read /token body: %w", err)
		return r
	}
	if len(bytes.TrimSpace(body)) > 0 {
		var err error
		if r.Status == http.StatusOK {
			var t localapi.TokenResponse
			err = json.Unmarshal(body, &t)
			r.Token, r.Lease, r.LeaseUID, r.ExpiresInMs = t.Token, t.Lease, t.LeaseUID, t.ExpiresInMs
		} else {
			var e localapi.NotLeaderResponse
			err = json.Unmarshal(body, &e)
			r.Error, r.Holder = e.Error, e.Holder
		}
		if err != nil {
			r.Err = fmt.Errorf("decode /token body %q (status %d): %w", body, resp.StatusCode, err)
		}
	}
	if r.Err == nil && r.Status == http.StatusOK && r.Token <= 0 {
		r.Err = fmt.Errorf("/token returned 200 without a positive token: %q", body)
	}
	return r
}

// TokenText calls GET /token with Accept: text/plain and returns status and body.
func (c *APIClient) TokenText(ctx context.Context) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+"/token", nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// Leader calls GET /leader.
func (c *APIClient) Leader(ctx context.Context) (LeaderStatus, error) {
	var s LeaderStatus
	code, body, err := c.get(ctx, "/leader")
	if err != nil {
		return s, err
	}
	if code != http.StatusOK {
		return s, fmt.Errorf("GET /leader: status %d: %s", code, body)
	}
	if err := json.Unmarshal(body, &s); err != nil {
		return s, fmt.Errorf("GET /leader: decode %q: %w", body, err)
	}
	return s, nil
}

// Release calls POST /release.
func (c *APIClient) Release(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+"/release", nil)
	if err != nil {
		return err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("POST /release: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusNoContent {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("POST /release: status %d: %s", resp.StatusCode, b)
	}
	return nil
}

// Status returns the status code of GET path (e.g. /healthz, /readyz).
func (c *APIClient) Status(ctx context.Context, path string) (int, error) {
	code, _, err := c.get(ctx, path)
	return code, err
}

func (c *APIClient) get(ctx context.Context, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("GET %s: %w", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("GET %s: read body: %w", path, err)
	}
	return resp.StatusCode, b, nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FreeAddress returns 127.0.0.1:<free port>.
func FreeAddress() (string, error) {
	p, err := FreePort()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(p), nil
}
