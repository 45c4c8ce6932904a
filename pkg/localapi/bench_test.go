package localapi

import (
	"net/http"
	"testing"
)

// discard is a ResponseWriter that keeps nothing but its header map.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

func benchmarkPath(b *testing.B, path string, hdr http.Header) {
	el := &fakeElector{status: leading, alive: true}
	h := NewHandler(el, nil)
	req, _ := http.NewRequest("GET", path, nil)
	for k, v := range hdr {
		req.Header[k] = v
	}
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, req)
	}
}

func BenchmarkLeader(b *testing.B) { benchmarkPath(b, "/leader", nil) }
func BenchmarkLeaderNotModified(b *testing.B) {
	benchmarkPath(b, "/leader", http.Header{"If-None-Match": {leaderETag(&leading, appNone)}})
}
func BenchmarkToken(b *testing.B) { benchmarkPath(b, "/token", nil) }
