package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// TestHealthEndpointSwitches: /healthz is 200 until POST /health?fail=true,
// 503 until fail=false; bad requests get a 4xx with a JSON error.
func TestHealthEndpointSwitches(t *testing.T) {
	srv := httptest.NewServer(&health{})
	defer srv.Close()
	get := func(want int, wantHealthy bool) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		var body healthResponse
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != want || body.Healthy != wantHealthy {
			t.Fatalf("GET /healthz = %d %+v, want %d healthy=%v", resp.StatusCode, body, want, wantHealthy)
		}
	}
	post := func(method, query string, want int) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+"/health"+query, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != want {
			t.Fatalf("%s /health%s = %d, want %d", method, query, resp.StatusCode, want)
		}
		if want >= 400 {
			var e errorBody
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || e.Error == "" {
				t.Fatalf("%s /health%s: body is not a JSON error (%v)", method, query, err)
			}
		}
	}
	get(200, true)
	post(http.MethodPost, "?fail=true", 204)
	get(503, false)
	post(http.MethodPost, "?fail=true", 204)
	get(503, false)
	post(http.MethodPost, "?fail=false", 204)
	get(200, true)
	post(http.MethodPost, "?fail=maybe", 400)
	post(http.MethodPost, "", 400)
	post(http.MethodGet, "?fail=true", 405)
	get(200, true)
	if resp, err := http.Post(srv.URL+"/healthz", "", nil); err != nil || resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Fatalf("POST /healthz = %v %v, want 405 with Allow", resp, err)
	}
	if resp, err := http.Get(srv.URL + "/nope"); err != nil || resp.StatusCode != 404 {
		t.Fatalf("GET /nope = %v %v, want 404", resp, err)
	}
}

// TestHealthCommandSwitchesARunningWriter: the writer serves the health
// endpoint on --health-listen, and `elector-demo health fail|pass` switches
// it, as `kubectl exec ... /elector-demo health fail` does in a pod.
func TestHealthCommandSwitchesARunningWriter(t *testing.T) {
	sc := &fakeSidecar{}
	sidecar := httptest.NewServer(sc)
	defer sidecar.Close()
	store := httptest.NewServer(http.NotFoundHandler())
	defer store.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr framework.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--sidecar=" + sidecar.URL, "--store=" + store.URL, "--interval=1s", "--writer=pod-a",
			"--health-listen=127.0.0.1:0"}, fakeEnv(nil), nil, &stdout, &stderr)
	}()
	addr := waitLine(t, &stdout, `result=health-listening address=(\S+)`)[1]
	status := func() int {
		t.Helper()
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if s := status(); s != 200 {
		t.Fatalf("healthz %d at start, want 200", s)
	}
	for _, tc := range []struct {
		args []string
		vars map[string]string
		want int
		log  string
	}{
		{[]string{"health", "fail", "--addr=" + addr}, nil, 503, "result=health-switched healthy=false"},
		{[]string{"health", "pass"}, map[string]string{"ELECTOR_DEMO_HEALTH_LISTEN": addr}, 200, "result=health-switched healthy=true"},
	} {
		var out, errOut framework.SyncBuffer
		if code := run(ctx, tc.args, fakeEnv(tc.vars), nil, &out, &errOut); code != 0 {
			t.Fatalf("%v: exit %d, stderr %q", tc.args, code, errOut.String())
		}
		if s := status(); s != tc.want {
			t.Fatalf("after %v: healthz %d, want %d", tc.args, s, tc.want)
		}
		waitLine(t, &stdout, tc.log)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("writer exit %d, stderr %q", code, stderr.String())
	}
}

func TestHealthCommandErrors(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		code     int
		contains string
	}{
		{"no verb", []string{"health"}, 2, "want `elector-demo health fail`"},
		{"unknown verb", []string{"health", "break"}, 2, "unexpected argument"},
		{"bad addr", []string{"health", "fail", "--addr=nope"}, 2, `--addr "nope"`},
		{"nobody listening", []string{"health", "fail", "--addr=127.0.0.1:1"}, 1, "connection refused"},
		{"bad health-listen on the writer", []string{"--store=http://s:1", "--health-listen=8080"}, 2, `--health-listen "8080"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr framework.SyncBuffer
			code := run(context.Background(), tt.args, fakeEnv(nil), nil, &stdout, &stderr)
			msg := strings.TrimSpace(stderr.String())
			if code != tt.code || !strings.Contains(msg, tt.contains) || strings.Contains(msg, "\n") {
				t.Fatalf("exit %d stderr %q, want exit %d and one line containing %q", code, msg, tt.code, tt.contains)
			}
		})
	}
}
