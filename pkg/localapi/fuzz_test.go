package localapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
)

// fuzzStatuses are the election states FuzzHandler picks from.
var fuzzStatuses = []election.Status{leading, following, nobody, unsafe, notReady, withdrawn, timedOut, {}}

// FuzzHandler sends the local API any method, path, query, conditional and
// stream headers and body, in any election state, and checks what must hold
// for every request: no panic, a real status code, every error a JSON object
// with an "error" message, no token unless this pod leads, no release on a
// rejected request, and no stream or long-poll slot left taken. The request's
// body is bodyLen bytes, sent with a Content-Length or (chunked) without
// one. The request's context is already cancelled, so that /watch and a waiting long-poll end
// after their first write.
//
// state picks the election: bits 0-2 the Status (fuzzStatuses), bit 3 Alive,
// bit 4 a failing Release, bit 5 WithAppHealth, bit 6 the app's health.
func FuzzHandler(f *testing.F) {
	etag := leaderETag(&leading, appNone, 0)
	for _, s := range []struct {
		method, path, query, ifNoneMatch, lastEventID, accept string
		bodyLen                                               uint16
		chunked                                               bool
		state                                                 uint8
	}{
		{"GET", "/leader", "", "", "", "", 0, false, 0x08},
		{"GET", "/leader", "wait=30s", etag, "", "", 0, false, 0x08},
		{"GET", "/leader", "wait=1ns", "*", "", "", 0, false, 0x09},
		{"GET", "/leader", "wait=-1s", etag, "", "", 0, false, 0x08},
		{"GET", "/leader", "wait=1h", "W/" + etag + ", \"x\"", "", "", 0, false, 0x08},
		{"GET", "/leader", "wait=5s&wait=6s", etag, "", "", 0, false, 0x08},
		{"HEAD", "/leader", "", etag, "", "", 0, false, 0x28},
		{"GET", "/watch", "", "", "", "", 0, false, 0x08},
		{"GET", "/watch", "", "", etag, "", 0, false, 0x68},
		{"HEAD", "/watch", "", "", "", "", 0, false, 0x09},
		{"GET", "/watch", "x=1", "", "", "", 0, false, 0x08},
		{"GET", "/token", "", "", "", "", 0, false, 0x08},
		{"GET", "/token", "", "", "", "text/plain", 0, false, 0x09},
		{"GET", "/token", "", "", "", "text/plain;q=0.5, application/json", 0, false, 0x0a},
		{"GET", "/token", "", "", "", "", 0, false, 0x0b},
		{"GET", "/token", "", "", "", "", 0, false, 0x0c},
		{"GET", "/token", "a=%zz", "", "", "", 0, false, 0x08},
		{"POST", "/release", "", "", "", "", 0, false, 0x08},
		{"POST", "/release", "for=5m", "", "", "", 2, false, 0x08},
		{"POST", "/release", "for=0s", "", "", "", 0, false, 0x18},
		{"POST", "/release", "for=25h", "", "", "", 0, false, 0x08},
		{"POST", "/release", "", "", "", "", MaxRequestBodyBytes + 1, false, 0x08},
		{"POST", "/release", "", "", "", "", MaxRequestBodyBytes + 1, true, 0x08},
		{"GET", "/release", "", "", "", "", 0, false, 0x08},
		{"GET", "/healthz", "", "", "", "", 0, false, 0x00},
		{"GET", "/readyz", "", "", "", "", 0, false, 0x0c},
		{"GET", "/metrics", "", "", "", "", 0, false, 0x08},
		{"DELETE", "/token", "", "", "", "", 0, false, 0x08},
		{"", "", "", "", "", "", 0, false, 0},
		{"GET", "/\xff\"token\":7", "", "", "", "", 0, false, 0x09},
	} {
		f.Add(s.method, s.path, s.query, s.ifNoneMatch, s.lastEventID, s.accept, s.bodyLen, s.chunked, s.state)
	}
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "elector_is_leader 1\n") })
	f.Fuzz(func(t *testing.T, method, path, query, ifNoneMatch, lastEventID, accept string, bodyLen uint16, chunked bool, state uint8) {
		status := fuzzStatuses[int(state&7)%len(fuzzStatuses)]
		el := &fakeElector{status: status, alive: state&0x08 != 0}
		if state&0x10 != 0 {
			el.releaseErr = errors.New("lease write failed")
		}
		var opts []Option
		if state&0x20 != 0 {
			healthy := state&0x40 != 0
			opts = append(opts, WithAppHealth(func() bool { return healthy }))
		}
		h := NewHandler(el, metrics, opts...)

		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, fuzzRequest(method, path, query, ifNoneMatch, lastEventID, accept, bodyLen, chunked))
		checkAnyAnswer(t, h, rec)
		code, got := rec.Code, rec.Body.Bytes()
		if !status.IsLeader {
			if path == "/token" && code == http.StatusOK {
				t.Fatalf("GET /token answered 200 to a pod that does not lead: %q", got)
			}
			if code < 400 && bytes.Contains(got, []byte(`"token"`)) {
				t.Fatalf("a pod that does not lead answered %d with a token: %q", code, got)
			}
		}
		rejected := code == http.StatusBadRequest || code == http.StatusRequestEntityTooLarge ||
			code == http.StatusNotFound || code == http.StatusMethodNotAllowed
		if el.released > 0 && (rejected || method != http.MethodPost || path != "/release") {
			t.Fatalf("%s %s?%s answered %d and released the lease", method, path, query, code)
		}
		if code == http.StatusRequestEntityTooLarge && int(bodyLen) <= MaxRequestBodyBytes {
			t.Fatalf("413 for a body of %d bytes", bodyLen)
		}
		_, routed := h.routes[path]
		if routed && !chunked && int(bodyLen) > MaxRequestBodyBytes && code != http.StatusRequestEntityTooLarge &&
			code != http.StatusMethodNotAllowed {
			t.Fatalf("%s %s with a body of %d bytes answered %d, want 413", method, path, bodyLen, code)
		}
		if strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream") && code != http.StatusOK {
			t.Fatalf("stream with status %d", code)
		}
	})
}

// fuzzRequest is a fuzz case's request, its context already canceled (a
// stream or a long-poll returns at once). The content of a body does not
// matter (no endpoint reads it), its length does.
func fuzzRequest(method, path, query, ifNoneMatch, lastEventID, accept string, bodyLen uint16, chunked bool) *http.Request {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := (&http.Request{
		Method: method, URL: &url.URL{Path: path, RawQuery: query},
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Host: "127.0.0.1:4040", RemoteAddr: "127.0.0.1:50000", Body: http.NoBody,
	}).WithContext(ctx)
	for k, v := range map[string]string{"If-None-Match": ifNoneMatch, "Last-Event-ID": lastEventID, "Accept": accept} {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	if bodyLen > 0 {
		req.Body = io.NopCloser(bytes.NewReader(bytes.Repeat([]byte{'x'}, int(bodyLen))))
		req.ContentLength = int64(bodyLen)
		if chunked {
			req.ContentLength = -1
		}
	}
	return req
}

// checkAnyAnswer holds every answer of h, whatever the request, to a real
// status, every stream and long-poll slot given back, a JSON error as the
// body of a 4xx or 5xx, and an Allow header with a 405.
func checkAnyAnswer(t *testing.T, h *Handler, rec *httptest.ResponseRecorder) {
	t.Helper()
	code, got := rec.Code, rec.Body.Bytes()
	if code < 200 || code > 599 || http.StatusText(code) == "" {
		t.Fatalf("status %d", code)
	}
	if n := h.waiters.Load(); n != 0 {
		t.Fatalf("%d stream or long-poll slots still taken after the request", n)
	}
	if code >= 400 && len(got) > 0 {
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("%d with Content-Type %q: %q", code, ct, got)
		}
		var e struct {
			Error *string `json:"error"`
		}
		if err := json.Unmarshal(got, &e); err != nil || e.Error == nil || *e.Error == "" {
			t.Fatalf("%d body is not a JSON error (%v): %q", code, err, got)
		}
	}
	if code == http.StatusMethodNotAllowed && rec.Header().Get("Allow") == "" {
		t.Fatal("405 without Allow")
	}
}
