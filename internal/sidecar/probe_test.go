package sidecar

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestProbe(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			_, _ = io.WriteString(w, `{"status":"ok"}`)
		case "/token":
			w.WriteHeader(http.StatusConflict)
			_, _ = io.WriteString(w, `{"error":"not the leader"}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	_, port, _ := strings.Cut(addr, ":")
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		wantCode int
		wantOut  string
		wantErr  string
	}{
		{name: "default path from env address", env: map[string]string{"ELECTOR_HTTP_ADDRESS": addr}, wantOut: `{"status":"ok"}`},
		{name: "all-interfaces address probes loopback", env: map[string]string{"ELECTOR_HTTP_ADDRESS": "0.0.0.0:" + port}, wantOut: `{"status":"ok"}`},
		{name: "flag address", args: []string{"--http-address=" + addr, "/healthz"}, wantOut: `{"status":"ok"}`},
		{name: "non-2xx fails but prints the body", args: []string{"--http-address=" + addr, "/token"}, wantCode: 1, wantOut: "not the leader", wantErr: "409"},
		{name: "nothing listening", args: []string{"--http-address=127.0.0.1:1"}, wantCode: 1, wantErr: "connect"},
		{name: "bad path", args: []string{"--http-address=" + addr, "healthz"}, wantCode: 2, wantErr: "must start with /"},
		{name: "two paths", args: []string{"/a", "/b"}, wantCode: 2, wantErr: "at most one PATH"},
		{name: "unknown flag", args: []string{"--nope"}, wantCode: 2, wantErr: "unknown flag"},
		{name: "bad address", args: []string{"--http-address=nope"}, wantCode: 2, wantErr: "want host:port"},
		{name: "help", args: []string{"--help"}, wantOut: "usage: elector-sidecar probe"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb strings.Builder
			code := Probe(tt.args, testEnv(tt.env, "", "h"), &out, &errb)
			if code != tt.wantCode || !strings.Contains(out.String(), tt.wantOut) || !strings.Contains(errb.String(), tt.wantErr) {
				t.Fatalf("Probe(%v) = %d, stdout %q, stderr %q; want %d, %q, %q", tt.args, code, out.String(), errb.String(), tt.wantCode, tt.wantOut, tt.wantErr)
			}
		})
	}
}
