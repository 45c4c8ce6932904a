package localapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
)

// `make bench` reports these (section 4 of test/cmd/elector-bench runs them with
// -benchmem): the handlers alone, per request, beside the bare net/http
// handler that the load test uses as its baseline.

// discard is a ResponseWriter that keeps nothing but its header map.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// bareBody is the size and shape of a /token answer, as the bench's bare
// server sends it.
var bareBody = func() []byte {
	b, err := json.Marshal(TokenResponse{Token: 42, Lease: "bench/bench-localapi", LeaseUID: "0f8fad5b-d9cb-469f-a165-70867728950e", ExpiresInMs: 14321})
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}()

// bareHandler is test/cmd/elector-bench's bare-server handler: a constant body
// with the same headers.
var bareHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Content-Length", strconv.Itoa(len(bareBody)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(bareBody)
})

func request(path string, hdr http.Header) *http.Request {
	req, _ := http.NewRequest("GET", path, nil)
	for k, v := range hdr {
		req.Header[k] = v
	}
	return req
}

func benchmarkHandler(b *testing.B, h http.Handler, req *http.Request) {
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, req)
	}
}

func leadingHandler() *Handler {
	return NewHandler(&fakeElector{status: leading, alive: true}, nil)
}

func BenchmarkLocalAPIBareHandler(b *testing.B) {
	benchmarkHandler(b, bareHandler, request("/token", nil))
}

func BenchmarkLocalAPILeader(b *testing.B) {
	benchmarkHandler(b, leadingHandler(), request("/leader", nil))
}

func BenchmarkLocalAPILeaderNotModified(b *testing.B) {
	benchmarkHandler(b, leadingHandler(), request("/leader", http.Header{"If-None-Match": {leaderETag(&leading, appNone, 0)}}))
}

func BenchmarkLocalAPIToken(b *testing.B) {
	benchmarkHandler(b, leadingHandler(), request("/token", nil))
}

// allocsPerRequest is the average allocations of one request to h.
func allocsPerRequest(h http.Handler, req *http.Request) float64 {
	w := &discard{h: http.Header{}}
	return testing.AllocsPerRun(1000, func() {
		clear(w.h)
		h.ServeHTTP(w, req)
	})
}

func TestLeaderAndTokenAllocateNoMoreThanABareHandler(t *testing.T) {
	bare := allocsPerRequest(bareHandler, request("/token", nil))
	h := leadingHandler()
	for _, tc := range []struct {
		path string
		hdr  http.Header
	}{
		{"/leader", nil},
		{"/leader", http.Header{"If-None-Match": {leaderETag(&leading, appNone, 0)}}},
		{"/token", nil},
		{"/token", http.Header{"Accept": {"text/plain"}}},
		{"/token", http.Header{"Accept": {"application/json, */*;q=0.5"}}},
	} {
		if got := allocsPerRequest(h, request(tc.path, tc.hdr)); got > bare {
			t.Errorf("GET %s %v: %v allocations per request, a bare handler %v", tc.path, tc.hdr, got, bare)
		}
	}
}
