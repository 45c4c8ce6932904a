package httpstore

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
)

// startServer runs a store server on a test listener and a client of it.
func startServer(t *testing.T) (*Server, *Client) {
	t.Helper()
	srv := NewServer(nil)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return srv, NewClient(ts.URL, "tester")
}

func TestClientServerSequence(t *testing.T) {
	srv, c := startServer(t)
	ctx := context.Background()

	steps := []struct {
		token     int64
		value     string
		wantStale bool
		wantValue string
		wantHigh  int64
	}{
		{token: 1, value: "a", wantValue: "a", wantHigh: 1},
		{token: 1, value: "b", wantValue: "b", wantHigh: 1},
		{token: 4, value: "c", wantValue: "c", wantHigh: 4},
		{token: 3, value: "stale", wantStale: true, wantValue: "c", wantHigh: 4},
		{token: 4, value: "d", wantValue: "d", wantHigh: 4},
	}
	for i, s := range steps {
		err := c.Write(ctx, s.token, []byte(s.value))
		if s.wantStale {
			var ste *fencing.StaleTokenError
			if !errors.Is(err, fencing.ErrStaleToken) || !errors.As(err, &ste) || ste.Highest != s.wantHigh || ste.Token != s.token {
				t.Fatalf("step %d: Write(%d) = %v, want stale with highest %d", i, s.token, err, s.wantHigh)
			}
		} else if err != nil {
			t.Fatalf("step %d: Write(%d) = %v", i, s.token, err)
		}
		h, v, err := c.Read(ctx)
		if err != nil || h != s.wantHigh || string(v) != s.wantValue {
			t.Fatalf("step %d: Read = %d %q %v, want %d %q", i, h, v, err, s.wantHigh, s.wantValue)
		}
	}
	ws := srv.Writes()
	if len(ws) != len(steps) {
		t.Fatalf("log has %d writes, want %d", len(ws), len(steps))
	}
	var seqs []int64
	for _, w := range ws {
		if w.Writer != "tester" {
			t.Fatalf("writer %q, want tester", w.Writer)
		}
		if w.Accepted {
			seqs = append(seqs, w.Seq)
		} else if w.Seq != 0 || !w.Stale {
			t.Fatalf("rejected write %+v: want Seq 0 and Stale", w)
		}
	}
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("accepted seqs %v, want 1..n", seqs)
		}
	}
}

func TestServerErrors(t *testing.T) {
	ts := httptest.NewServer(NewServer(nil))
	defer ts.Close()
	tests := []struct {
		name, method, path, token string
		want                      int
	}{
		{"missing token", http.MethodPut, "/value", "", http.StatusBadRequest},
		{"bad token", http.MethodPut, "/value", "x1", http.StatusBadRequest},
		{"negative token", http.MethodPut, "/value", "-3", http.StatusBadRequest},
		{"wrong method", http.MethodPost, "/value", "1", http.StatusMethodNotAllowed},
		{"unknown path", http.MethodGet, "/nope", "", http.StatusNotFound},
		{"read empty", http.MethodGet, "/value", "", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, ts.URL+tt.path, strings.NewReader("v"))
			if tt.token != "" {
				req.Header.Set(TokenHeader, tt.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.want)
			}
		})
	}
}

// TestConcurrentWritersCommitOrder: accepted writes, in commit order, never
// go down in token, and the final value belongs to the highest token.
func TestConcurrentWritersCommitOrder(t *testing.T) {
	srv := NewServer(nil)
	ts := httptest.NewServer(srv)
	defer ts.Close()
	var wg sync.WaitGroup
	for tok := int64(1); tok <= 5; tok++ {
		wg.Add(1)
		go func(tok int64) {
			defer wg.Done()
			c := NewClient(ts.URL, "w")
			for i := 0; i < 40; i++ {
				if err := c.Write(context.Background(), tok, []byte{byte('0' + tok)}); err != nil && !errors.Is(err, fencing.ErrStaleToken) {
					t.Errorf("token %d: %v", tok, err)
					return
				}
			}
		}(tok)
	}
	wg.Wait()
	accepted := map[int64]int64{}
	for _, w := range srv.Writes() {
		if w.Accepted {
			accepted[w.Seq] = w.Token
		}
	}
	var prev int64
	for seq := int64(1); seq <= int64(len(accepted)); seq++ {
		tok, ok := accepted[seq]
		if !ok {
			t.Fatalf("missing seq %d", seq)
		}
		if tok < prev {
			t.Fatalf("seq %d token %d after token %d", seq, tok, prev)
		}
		prev = tok
	}
	if h, v, _ := srv.Read(context.Background()); h != 5 || string(v) != "5" {
		t.Fatalf("final %d %q, want 5 \"5\"", h, v)
	}
}

// TestLeaseUIDRoundTrip: the Lease UID goes over HTTP with the token, is
// recorded next to it, read back, and a reissued value under another Lease
// is rejected with both UIDs in the error.
func TestLeaseUIDRoundTrip(t *testing.T) {
	srv, c := startServer(t)
	ctx := context.Background()
	steps := []struct {
		token     fencing.Token
		wantStale bool
		wantHigh  fencing.Token
	}{
		{token: fencing.Token{Value: 7, LeaseUID: "uid-1"}, wantHigh: fencing.Token{Value: 7, LeaseUID: "uid-1"}},
		{token: fencing.Token{Value: 7, LeaseUID: "uid-1"}, wantHigh: fencing.Token{Value: 7, LeaseUID: "uid-1"}},
		{token: fencing.Token{Value: 7, LeaseUID: "uid-2"}, wantStale: true, wantHigh: fencing.Token{Value: 7, LeaseUID: "uid-1"}},
		{token: fencing.Token{Value: 7}, wantHigh: fencing.Token{Value: 7, LeaseUID: "uid-1"}},
		{token: fencing.Token{Value: 6, LeaseUID: "uid-1"}, wantStale: true, wantHigh: fencing.Token{Value: 7, LeaseUID: "uid-1"}},
		{token: fencing.Token{Value: 8, LeaseUID: "uid-2"}, wantHigh: fencing.Token{Value: 8, LeaseUID: "uid-2"}},
	}
	for i, s := range steps {
		err := c.WriteToken(ctx, s.token, []byte(s.token.String()))
		if s.wantStale {
			var ste *fencing.StaleTokenError
			if !errors.Is(err, fencing.ErrStaleToken) || !errors.As(err, &ste) || ste.Token != s.token.Value || ste.LeaseUID != s.token.LeaseUID ||
				ste.Highest != s.wantHigh.Value || ste.HighestLeaseUID != s.wantHigh.LeaseUID {
				t.Fatalf("step %d: WriteToken(%v) = %#v, want stale with highest %v", i, s.token, err, s.wantHigh)
			}
		} else if err != nil {
			t.Fatalf("step %d: WriteToken(%v) = %v", i, s.token, err)
		}
		h, _, err := c.ReadToken(ctx)
		if err != nil || h != s.wantHigh {
			t.Fatalf("step %d: ReadToken = %v %v, want %v", i, h, err, s.wantHigh)
		}
		if sh, _, _ := srv.ReadToken(ctx); sh != s.wantHigh {
			t.Fatalf("step %d: server ReadToken = %v, want %v", i, sh, s.wantHigh)
		}
	}
	ws := srv.Writes()
	if w := ws[2]; w.Accepted || !w.Stale || w.LeaseUID != "uid-2" || w.HighestLeaseUID != "uid-1" || !strings.Contains(w.Err, "lease UID uid-1") {
		t.Fatalf("log of the reissued-value write: %+v", w)
	}
	if w := ws[3]; !w.Accepted || w.LeaseUID != "" || w.Highest != 7 || w.HighestLeaseUID != "uid-1" {
		t.Fatalf("log of the UID-less write: %+v", w)
	}
}

// TestOldClientWithoutUID: a client of the old protocol (no
// X-Fencing-Lease-UID, ignoring the new answer fields) keeps working with the
// value-only rule, also after UID-aware writes.
func TestOldClientWithoutUID(t *testing.T) {
	srv := NewServer(nil)
	ts := httptest.NewServer(srv)
	defer ts.Close()
	ctx := context.Background()
	if err := NewClient(ts.URL, "new").WriteToken(ctx, fencing.Token{Value: 3, LeaseUID: "uid-1"}, []byte("new")); err != nil {
		t.Fatal(err)
	}
	put := func(token string) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodPut, ts.URL+"/value", strings.NewReader("old "+token))
		req.Header.Set(TokenHeader, token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body
	}
	if code, body := put("3"); code != http.StatusOK || body["accepted"] != true || body["highest"] != float64(3) {
		t.Fatalf("old client, same value: %d %v", code, body)
	}
	if code, body := put("2"); code != http.StatusConflict || body["highest"] != float64(3) {
		t.Fatalf("old client, lower value: %d %v", code, body)
	}
	if code, body := put("4"); code != http.StatusOK || body["highest"] != float64(4) {
		t.Fatalf("old client, higher value: %d %v", code, body)
	}
	if h, v, err := srv.ReadToken(ctx); err != nil || h != (fencing.Token{Value: 4}) || string(v) != "old 4" {
		t.Fatalf("store %v %q %v, want {4 \"\"} \"old 4\"", h, v, err)
	}
}
