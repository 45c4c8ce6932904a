package localapi

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Writing answers: JSON bodies from a pool, the shared header values, and
// the JSON error body.

// wantsText reports whether the client asked for text/plain over JSON.
func wantsText(accept string) bool {
	if accept == "" {
		return false
	}
	for accept != "" {
		var part string
		part, accept, _ = strings.Cut(accept, ",")
		mt, _, _ := strings.Cut(strings.TrimSpace(part), ";")
		switch strings.ToLower(strings.TrimSpace(mt)) {
		case "text/plain":
			return true
		case "application/json", "*/*", "application/*":
			return false
		}
	}
	return false
}

func writeJSON(w http.ResponseWriter, code int, body []byte) {
	hdr := w.Header()
	hdr["Content-Type"] = hdrJSON
	hdr["Content-Length"] = contentLength(len(body))
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// Header values shared by every answer, so that /leader and /token
// allocate nothing per request (net/http only reads a handler's header
// values; Add on one of these copies it, its capacity being 1). Keys are
// in canonical form, as Header.Set would store them.
var (
	hdrJSON    = []string{"application/json"}
	hdrText    = []string{"text/plain; charset=utf-8"}
	hdrNoStore = []string{"no-store"}
)

// contentLengths caches the Content-Length values of short bodies.
var contentLengths [1024]atomic.Pointer[[]string]

func contentLength(n int) []string {
	if n >= len(contentLengths) {
		return []string{strconv.Itoa(n)}
	}
	if v := contentLengths[n].Load(); v != nil {
		return *v
	}
	v := []string{strconv.Itoa(n)}
	contentLengths[n].Store(&v)
	return v
}

// bodies are the buffers answers are encoded into; w.Write copies them.
var bodies = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

func getBody() *[]byte { return bodies.Get().(*[]byte) }

func putBody(b *[]byte) {
	if cap(*b) > 4<<10 {
		return // an unusually long answer: do not keep its buffer
	}
	*b = (*b)[:0]
	bodies.Put(b)
}

// writeError writes {"error": msg}.
func writeError(w http.ResponseWriter, code int, msg string) {
	resp := ErrorResponse{Error: msg}
	writeJSON(w, code, append(resp.AppendJSON(make([]byte, 0, 128)), '\n'))
}
