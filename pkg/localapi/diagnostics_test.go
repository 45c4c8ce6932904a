package localapi

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
)

// TestDiagnosticsServesOnlyHealthReadyAndMetrics: the diagnostics handler
// answers /healthz, /readyz and /metrics exactly as the local API does (same
// status, body and content type, in every state of the election), and every
// other path, /token and /release first, is a 404 with the local API's JSON
// error. A wrong method is a 405 as on the local API.
func TestDiagnosticsServesOnlyHealthReadyAndMetrics(t *testing.T) {
	el := &fakeElector{}
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = io.WriteString(w, "elector_is_leader 1\n")
	})
	api := NewHandler(el, metrics)
	diag := api.Diagnostics()

	do := func(h http.Handler, method, path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		return rec
	}

	for _, state := range []struct {
		name   string
		alive  bool
		status election.Status
		want   map[string]int // path -> status on both listeners
	}{
		{"loop not running", false, election.Status{}, map[string]int{"/healthz": 503, "/readyz": 503, "/metrics": 200}},
		{"running, Lease not observed yet", true, election.Status{}, map[string]int{"/healthz": 200, "/readyz": 503, "/metrics": 200}},
		{"leading", true, leading, map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 200}},
	} {
		el.alive, el.status = state.alive, state.status
		for _, path := range DiagnosticsPaths {
			for _, method := range []string{http.MethodGet, http.MethodHead} {
				got, want := do(diag, method, path), do(api, method, path)
				if got.Code != state.want[path] || got.Code != want.Code || got.Body.String() != want.Body.String() ||
					got.Header().Get("Content-Type") != want.Header().Get("Content-Type") {
					t.Errorf("%s: %s %s: diagnostics %d %q (%s), local API %d %q (%s); want %d on both", state.name, method, path,
						got.Code, got.Body, got.Header().Get("Content-Type"), want.Code, want.Body, want.Header().Get("Content-Type"), state.want[path])
				}
			}
		}
	}

	// Everything else is the local API's 404, whatever the method; the local API still serves it.
	el.alive, el.status = true, leading
	for _, tt := range []struct{ method, path string }{
		{"GET", "/token"}, {"POST", "/release"}, {"GET", "/release"}, {"GET", "/leader"}, {"GET", "/watch"},
		{"GET", "/"}, {"GET", "/healthz/"}, {"GET", "/metrics/x"}, {"GET", "/tokens"}, {"DELETE", "/token"},
	} {
		rec := do(diag, tt.method, tt.path)
		var body ErrorResponse
		if rec.Code != http.StatusNotFound || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") ||
			json.Unmarshal(rec.Body.Bytes(), &body) != nil || body.Error != "no such endpoint: "+tt.path {
			t.Errorf("diagnostics %s %s: %d %q (%s), want 404 {\"error\":\"no such endpoint: %s\"}", tt.method, tt.path,
				rec.Code, rec.Body, rec.Header().Get("Content-Type"), tt.path)
		}
	}
	if rec := do(api, "GET", "/token"); rec.Code != http.StatusOK {
		t.Errorf("local API /token: %d, want 200 (the diagnostics handler must not change it)", rec.Code)
	}
	if el.released != 0 {
		t.Errorf("POST /release on the diagnostics handler released %d times, want never", el.released)
	}

	// A wrong method on a diagnostics path: 405 with Allow, as on the local API.
	rec := do(diag, http.MethodPost, "/readyz")
	if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /readyz: %d Allow %q, want 405 with Allow: GET, HEAD", rec.Code, rec.Header().Get("Allow"))
	}

	// Without a metrics handler, /metrics is a 404 on both.
	if rec := do(NewHandler(el, nil).Diagnostics(), "GET", "/metrics"); rec.Code != http.StatusNotFound {
		t.Errorf("no metrics handler: /metrics %d, want 404", rec.Code)
	}
}
