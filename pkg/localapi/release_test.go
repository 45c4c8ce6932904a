package localapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
)

// TestReleaseErrors: each way Release can fail has its own status, and only a
// failed Lease write says "stepped down".
func TestReleaseErrors(t *testing.T) {
	// Wrapped the way election.Elector.Release wraps them.
	notProcessed := fmt.Errorf("%w: %w", election.ErrReleaseNotProcessed, context.DeadlineExceeded)
	unconfirmed := fmt.Errorf("%w: %w", election.ErrReleaseUnconfirmed, context.DeadlineExceeded)
	tests := []struct {
		name     string
		err      error
		wantCode int
		want     []string // substrings of the error message
		notWant  []string
	}{
		{name: "released", wantCode: 204},
		{name: "loop stopped", err: election.ErrNotRunning, wantCode: 503, want: []string{"not running"}, notWant: []string{"stepped down"}},
		{name: "loop stopped, wrapped", err: fmt.Errorf("release: %w", election.ErrNotRunning), wantCode: 503, notWant: []string{"stepped down"}},
		{name: "not taken by the loop", err: notProcessed, wantCode: 503,
			want: []string{"release not processed", "context deadline exceeded", "nothing changed", "token is unchanged"}, notWant: []string{"stepped down"}},
		{name: "taken, write not confirmed", err: unconfirmed, wantCode: 504,
			want: []string{"not confirmed in time", "context deadline exceeded", "token has stopped"}, notWant: []string{"stepped down", "failed"}},
		{name: "write failed", err: errors.New("conflict: the object has been modified"), wantCode: 502,
			want: []string{"stepped down, but writing the lease free failed: conflict: the object has been modified"}},
		{name: "write failed with a context error", err: context.DeadlineExceeded, wantCode: 502, want: []string{"stepped down"}},
	}
	for _, target := range []string{"/release", "/release?for=5m"} {
		for _, tt := range tests {
			t.Run(target+" "+tt.name, func(t *testing.T) { checkReleaseError(t, target, tt.err, tt.wantCode, tt.want, tt.notWant) })
		}
	}
}

// checkReleaseError: POST target, whose Release or ReleaseFor returns err,
// answers wantCode with an error message containing want and not notWant.
func checkReleaseError(t *testing.T, target string, releaseErr error, wantCode int, want, notWant []string) {
	t.Helper()
	el := &fakeElector{status: leading, alive: true, releaseErr: releaseErr}
	rec := httptest.NewRecorder()
	NewHandler(el, nil).ServeHTTP(rec, httptest.NewRequest("POST", target, nil))
	if rec.Code != wantCode {
		t.Fatalf("code %d, want %d; body %s", rec.Code, wantCode, rec.Body)
	}
	if el.released != 1 {
		t.Fatalf("Release called %d times", el.released)
	}
	if wantCode == 204 {
		if rec.Body.Len() != 0 {
			t.Fatalf("204 with a body: %q", rec.Body)
		}
		return
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	var e ErrorResponse
	dec := json.NewDecoder(rec.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || e.Error == "" {
		t.Fatalf("body is not an ErrorResponse (%v): %+v", err, e)
	}
	for _, w := range want {
		if !strings.Contains(e.Error, w) {
			t.Errorf("error %q does not contain %q", e.Error, w)
		}
	}
	for _, w := range notWant {
		if strings.Contains(e.Error, w) {
			t.Errorf("error %q contains %q", e.Error, w)
		}
	}
}
