package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	"github.com/elector-sidecar/elector-sidecar/pkg/fencing/httpstore"
	"github.com/elector-sidecar/elector-sidecar/pkg/localapi"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

func fakeEnv(vars map[string]string) env {
	return env{
		getenv:   func(k string) string { return vars[k] },
		hostname: func() (string, error) { return "host-1", nil },
	}
}

func TestParseWriter(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		vars    map[string]string
		want    writerConfig
		wantErr string
	}{
		{name: "defaults from POD_NAME", args: []string{"--store=http://127.0.0.1:7070"}, vars: map[string]string{"POD_NAME": "pod-a"},
			want: writerConfig{sidecar: "http://127.0.0.1:4040", store: "http://127.0.0.1:7070", interval: 500 * time.Millisecond, writer: "pod-a"}},
		{name: "hostname fallback", args: []string{"--store=configmap:ns/cm"},
			want: writerConfig{sidecar: "http://127.0.0.1:4040", store: "configmap:ns/cm", interval: 500 * time.Millisecond, writer: "host-1"}},
		{name: "env", vars: map[string]string{"ELECTOR_DEMO_SIDECAR": "http://127.0.0.1:5050/", "ELECTOR_DEMO_STORE": "configmap:demo/value",
			"ELECTOR_DEMO_INTERVAL": "2s", "ELECTOR_DEMO_WRITER": "w1", "POD_NAME": "ignored"},
			want: writerConfig{sidecar: "http://127.0.0.1:5050", store: "configmap:demo/value", interval: 2 * time.Second, writer: "w1"}},
		{name: "flag wins over env", args: []string{"--interval=100ms", "--writer=w2"},
			vars: map[string]string{"ELECTOR_DEMO_STORE": "http://s:1", "ELECTOR_DEMO_INTERVAL": "2s", "ELECTOR_DEMO_WRITER": "w1"},
			want: writerConfig{sidecar: "http://127.0.0.1:4040", store: "http://s:1", interval: 100 * time.Millisecond, writer: "w2"}},
		{name: "kubeobject store", args: []string{"--store=kubeobject:ns/fenced"}, vars: map[string]string{"POD_NAME": "pod-a"},
			want: writerConfig{sidecar: "http://127.0.0.1:4040", store: "kubeobject:ns/fenced", interval: 500 * time.Millisecond, writer: "pod-a"}},
		{name: "bad kubeobject spec", args: []string{"--store=kubeobject:ns/"}, wantErr: "kubeobject:<namespace>/<name>"},
		{name: "missing store", args: nil, wantErr: "--store is required"},
		{name: "bad store scheme", args: []string{"--store=redis://x"}, wantErr: "--store"},
		{name: "bad configmap spec", args: []string{"--store=configmap:only-name"}, wantErr: "configmap:<namespace>/<name>"},
		{name: "bad interval", args: []string{"--store=http://s:1", "--interval=fast"}, wantErr: "interval"},
		{name: "zero interval", args: []string{"--store=http://s:1", "--interval=0s"}, wantErr: "--interval"},
		{name: "bad interval env", vars: map[string]string{"ELECTOR_DEMO_STORE": "http://s:1", "ELECTOR_DEMO_INTERVAL": "x"}, wantErr: "ELECTOR_DEMO_INTERVAL"},
		{name: "bad sidecar", args: []string{"--store=http://s:1", "--sidecar=127.0.0.1:4040"}, wantErr: "--sidecar"},
		{name: "unknown flag", args: []string{"--stor=http://s:1"}, wantErr: "stor"},
		{name: "stray argument", args: []string{"--store=http://s:1", "extra"}, wantErr: "unexpected argument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			got, err := parseWriter(tt.args, fakeEnv(tt.vars), &stderr)
			if tt.wantErr != "" {
				var ue *usageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want a usage error containing %q", err, tt.wantErr)
				}
				if stderr.Len() != 0 {
					t.Fatalf("parse printed %q; usage goes only to -h", stderr.String())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *got != tt.want {
				t.Fatalf("got %+v, want %+v", *got, tt.want)
			}
		})
	}
}

func TestRunExitCodes(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		code     int
		oneLine  bool
		contains string
	}{
		{name: "bad flag", args: []string{"--interval=nope", "--store=http://s:1"}, code: 2, oneLine: true, contains: "interval"},
		{name: "missing store", args: nil, code: 2, oneLine: true, contains: "--store"},
		{name: "store bad listen", args: []string{"store", "--listen=nonsense"}, code: 2, oneLine: true, contains: "--listen"},
		{name: "help", args: []string{"-h"}, code: 0, contains: "Usage"},
		{name: "store help", args: []string{"store", "-h"}, code: 0, contains: "-listen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr framework.SyncBuffer
			code := run(context.Background(), tt.args, fakeEnv(nil), nil, &stdout, &stderr)
			if code != tt.code {
				t.Fatalf("exit %d, want %d (stderr %q)", code, tt.code, stderr.String())
			}
			msg := strings.TrimSpace(stderr.String())
			if tt.oneLine && strings.Contains(msg, "\n") {
				t.Fatalf("stderr is not one line: %q", msg)
			}
			if !strings.Contains(msg, tt.contains) {
				t.Fatalf("stderr %q does not contain %q", msg, tt.contains)
			}
		})
	}
}

// fakeSidecar serves /token: a token while token > 0, else 409.
type fakeSidecar struct {
	token atomic.Int64
}

func (f *fakeSidecar) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if tok := f.token.Load(); tok > 0 {
		_ = json.NewEncoder(w).Encode(localapi.TokenResponse{Token: tok, Lease: "ns/l", LeaseUID: "uid-1", ExpiresInMs: 1000})
		return
	}
	w.WriteHeader(http.StatusConflict)
	_ = json.NewEncoder(w).Encode(localapi.NotLeaderResponse{Error: "not the leader", Holder: "pod-b"})
}

// TestWriterLoop runs the writer against a fake sidecar and a real fenced
// HTTP store: accepted while leading, not-leader after, and a late write with
// the old token rejected once someone wrote with a higher one.
func TestWriterLoop(t *testing.T) {
	sc := &fakeSidecar{}
	sc.token.Store(1)
	sidecar := httptest.NewServer(sc)
	defer sidecar.Close()
	storeSrv := httpstore.NewServer(fencing.NewMemory())
	store := httptest.NewServer(storeSrv)
	defer store.Close()

	ctx, cancel := context.WithCancel(context.Background())
	late := make(chan os.Signal, 1)
	var stdout, stderr framework.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--sidecar=" + sidecar.URL, "--store=" + store.URL, "--interval=10ms", "--writer=pod-a"}, fakeEnv(nil), late, &stdout, &stderr)
	}()
	waitLine(t, &stdout, `writer=pod-a attempt=\d+ result=accepted token=1 highest=1 value="pod-a #\d+ token 1"`)

	sc.token.Store(0) // lost leadership
	waitLine(t, &stdout, `result=not-leader status=409 holder=pod-b`)
	if err := httpstore.NewClient(store.URL, "pod-b").Write(ctx, 2, []byte("pod-b")); err != nil {
		t.Fatal(err)
	}
	late <- os.Interrupt // any value: the signal channel only wakes the loop
	waitLine(t, &stdout, `result=rejected-stale token=1 highest=2 late=true`)
	if h, v, _ := storeSrv.Read(ctx); h != 2 || string(v) != "pod-b" {
		t.Fatalf("store %d %q, want 2 pod-b", h, v)
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d on cancel, want 0; stderr %q", code, stderr.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("writer did not stop")
	}
	waitLine(t, &stdout, `result=stopped`)
}

func TestStoreSubcommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr framework.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"store", "--listen=127.0.0.1:0"}, fakeEnv(nil), nil, &stdout, &stderr)
	}()
	m := waitLine(t, &stdout, `result=listening address=(\S+)`)
	c := httpstore.NewClient("http://"+m[1], "w")
	if err := c.Write(ctx, 5, []byte("five")); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, 4, []byte("four")); !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("write 4 after 5: %v", err)
	}
	waitLine(t, &stdout, `store writer=w result=accepted token=5 highest=5 value="five"`)
	waitLine(t, &stdout, `store writer=w result=rejected-stale token=4 highest=5`)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d, want 0 (stderr %q)", code, stderr.String())
	}
}

func waitLine(t *testing.T, b *framework.SyncBuffer, pattern string) []string {
	t.Helper()
	re := regexp.MustCompile(pattern)
	var m []string
	err := framework.Eventually(context.Background(), 5*time.Millisecond, 10*time.Second, fmt.Sprintf("a line matching %q", pattern), func(context.Context) error {
		if m = re.FindStringSubmatch(b.String()); m == nil {
			return fmt.Errorf("output so far:\n%s", b.String())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}
