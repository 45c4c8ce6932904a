package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// TestHTTPEndpointServesOnlyProbesAndMetrics: a real sidecar with --http-endpoint answers /healthz, /readyz and
// /metrics there exactly as on its local API, and 404s /token, /release and /leader with the local API's JSON
// error (POST /release there releases nothing); its deprecated alias --metrics-address (as
// ELECTOR_METRICS_ADDRESS) serves the same and logs a deprecation warning.
func TestHTTPEndpointServesOnlyProbesAndMetrics(t *testing.T) {
	g := newGroup(t, testTimings)
	endpoint, err := framework.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	alias, err := framework.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	spec := g.Template
	spec.Identity, spec.ExtraArgs = "pod-a", []string{"--http-endpoint=" + endpoint}
	a, err := g.StartSpec(g.ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	spec = g.Template
	spec.Identity, spec.Env = "pod-b", []string{"ELECTOR_METRICS_ADDRESS=" + alias}
	b, err := g.StartSpec(g.ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	leader, tok := g.waitLeader(startupTimeout)
	g.waitAllSee(leader, tok.Token)

	client := &http.Client{Timeout: 2 * time.Second}
	get := func(ctx context.Context, method, url string) (int, string, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), resp.Header.Get("Content-Type")
	}
	for _, c := range []struct {
		proc *framework.Candidate
		addr string
	}{{a, endpoint}, {b, alias}} {
		for _, path := range []string{"/healthz", "/readyz"} {
			code, body, _ := get(g.ctx, "GET", "http://"+c.addr+path)
			wantCode, wantBody, _ := get(g.ctx, "GET", c.proc.URL+path)
			if code != http.StatusOK || code != wantCode || body != wantBody {
				t.Errorf("%s: GET %s on the endpoint %d %q, on the local API %d %q; want 200 and the same", c.proc, path, code, body, wantCode, wantBody)
			}
		}
		code, body, _ := get(g.ctx, "GET", "http://"+c.addr+"/metrics")
		if want := fmt.Sprintf("elector_is_leader{lease=\"%s/%s\"}", g.namespace, g.lease); code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("%s: GET /metrics on the endpoint %d, want 200 with %s:\n%.400s", c.proc, code, want, body)
		}
		for _, r := range []struct{ method, path string }{{"GET", "/token"}, {"POST", "/release"}, {"GET", "/leader"}, {"GET", "/watch"}} {
			code, body, ctype := get(g.ctx, r.method, "http://"+c.addr+r.path)
			var e struct{ Error string }
			if code != http.StatusNotFound || !strings.HasPrefix(ctype, "application/json") || json.Unmarshal([]byte(body), &e) != nil ||
				e.Error != "no such endpoint: "+r.path {
				t.Errorf("%s: %s %s on the endpoint: %d %q (%s), want 404 {\"error\":\"no such endpoint: %s\"}", c.proc, r.method, r.path, code, body, ctype, r.path)
			}
		}
	}
	// POST /release on the endpoint released nothing: the leader still serves its token.
	if r := leader.Token(g.ctx); r.Err != nil || r.Status != http.StatusOK || r.Token != tok.Token {
		t.Errorf("leader %s /token after POST /release on the endpoints: %s, want 200 with token %d", leader, r, tok.Token)
	}
	const warning = "--metrics-address (ELECTOR_METRICS_ADDRESS) is deprecated: use --http-endpoint (ELECTOR_HTTP_ENDPOINT)"
	if !strings.Contains(b.Logs(), warning) || !strings.Contains(b.Logs(), "level=WARN") {
		t.Errorf("%s (ELECTOR_METRICS_ADDRESS) did not log the deprecation warning %q:\n%s", b, warning, b.LogTail(20))
	}
	if strings.Contains(a.Logs(), "deprecated") {
		t.Errorf("%s (--http-endpoint) logged a deprecation:\n%s", a, a.LogTail(20))
	}
}
