package apphealth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	testingclock "k8s.io/utils/clock/testing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// scripted is an app whose health endpoint answers what the test says:
// "200", "302", "503", ... (that status) or "hang" (no answer until the
// request is cancelled).
type scripted struct {
	mu       sync.Mutex
	answer   string
	received chan struct{} // one value per request
	srv      *httptest.Server
}

func newScripted(t *testing.T) *scripted {
	s := &scripted{answer: "200", received: make(chan struct{}, 100)}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		a := s.answer
		s.mu.Unlock()
		s.received <- struct{}{}
		if a == "hang" {
			<-r.Context().Done()
			return
		}
		var code int
		_, _ = fmt.Sscan(a, &code)
		if code >= 300 && code < 400 {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, a)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *scripted) set(a string) {
	s.mu.Lock()
	s.answer = a
	s.mu.Unlock()
}

// refusedURL is a loopback URL nobody listens on.
func refusedURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return "http://" + addr + "/healthz"
}

type call struct {
	healthy bool
	reason  string
}

type fixture struct {
	p     *Prober
	clock *testingclock.FakeClock
	reg   *prometheus.Registry
	calls []call
	// callErr is what OnChange returns next.
	callErr error
}

func newFixture(t *testing.T, url string, fail, succ int) *fixture {
	t.Helper()
	f := &fixture{clock: testingclock.NewFakeClock(time.Unix(1000, 0)), reg: prometheus.NewRegistry()}
	p, err := New(Config{
		URL: url, Period: 2 * time.Second, Timeout: time.Second,
		FailureThreshold: fail, SuccessThreshold: succ,
		Clock: f.clock, Registerer: f.reg,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnChange: func(_ context.Context, healthy bool, reason string) error {
			f.calls = append(f.calls, call{healthy, reason})
			return f.callErr
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	return f
}

// step runs one probe. A "hang" answer is cut by the timeout: the test
// waits for the request to arrive and moves the fake clock by the timeout.
func (f *fixture) step(t *testing.T, s *scripted, answer string) error {
	t.Helper()
	if s == nil {
		return f.p.Step(context.Background())
	}
	s.set(answer)
	if answer != "hang" {
		err := f.p.Step(context.Background())
		<-s.received
		return err
	}
	done := make(chan error, 1)
	go func() { done <- f.p.Step(context.Background()) }()
	<-s.received
	// The timeout's timer was set before the request went out.
	f.clock.Step(f.p.cfg.Timeout - time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("probe returned %v before its timeout", err)
	default:
	}
	f.clock.Step(time.Millisecond)
	return <-done
}

func TestProberStateFollowsThresholds(t *testing.T) {
	type step struct {
		answer  string // "" with no server: connection refused
		want    State
		call    string // OnChange call during this step: "healthy", "unhealthy: <part of the reason>", "" none
		wantErr string // part of the probe's error, "" for success
	}
	tests := []struct {
		name       string
		refused    bool
		fail, succ int
		steps      []step
	}{
		{name: "one success makes a new app healthy", fail: 3, succ: 1, steps: []step{
			{answer: "200", want: Healthy, call: "healthy"},
			{answer: "204", want: Healthy},
		}},
		{name: "3xx counts as success", fail: 1, succ: 1, steps: []step{
			{answer: "302", want: Healthy, call: "healthy"},
			{answer: "399", want: Healthy},
		}},
		{name: "failures below the threshold keep it healthy", fail: 3, succ: 1, steps: []step{
			{answer: "200", want: Healthy, call: "healthy"},
			{answer: "500", want: Healthy, wantErr: "status 500"},
			{answer: "503", want: Healthy, wantErr: "status 503"},
			{answer: "200", want: Healthy},
			{answer: "503", want: Healthy, wantErr: "status 503"},
			{answer: "503", want: Healthy, wantErr: "status 503"},
			{answer: "503", want: Unhealthy, call: "unhealthy: GET http://", wantErr: "status 503"},
		}},
		{name: "4xx is a failure", fail: 1, succ: 1, steps: []step{
			{answer: "200", want: Healthy, call: "healthy"},
			{answer: "404", want: Unhealthy, call: "unhealthy: ", wantErr: "status 404"},
		}},
		{name: "never healthy: failures from the start make it unhealthy, with a call", fail: 2, succ: 1, steps: []step{
			{answer: "503", want: Unknown, wantErr: "status 503"},
			{answer: "503", want: Unhealthy, call: "unhealthy: ", wantErr: "status 503"},
			{answer: "503", want: Unhealthy, wantErr: "status 503"},
		}},
		{name: "success threshold above one", fail: 1, succ: 3, steps: []step{
			{answer: "200", want: Unknown},
			{answer: "200", want: Unknown},
			{answer: "503", want: Unhealthy, call: "unhealthy: ", wantErr: "status 503"},
			{answer: "200", want: Unhealthy},
			{answer: "200", want: Unhealthy},
			{answer: "200", want: Healthy, call: "healthy"},
		}},
		{name: "a hanging app fails at the timeout", fail: 2, succ: 1, steps: []step{
			{answer: "200", want: Healthy, call: "healthy"},
			{answer: "hang", want: Healthy, wantErr: "no answer within 1s"},
			{answer: "hang", want: Unhealthy, call: "unhealthy: GET http://127.0.0.1", wantErr: "no answer within 1s"},
			{answer: "200", want: Healthy, call: "healthy"},
		}},
		{name: "flapping below both thresholds changes nothing", fail: 2, succ: 2, steps: []step{
			{answer: "200", want: Unknown},
			{answer: "200", want: Healthy, call: "healthy"},
			{answer: "503", want: Healthy, wantErr: "503"},
			{answer: "200", want: Healthy},
			{answer: "503", want: Healthy, wantErr: "503"},
			{answer: "503", want: Unhealthy, call: "unhealthy: ", wantErr: "503"},
			{answer: "200", want: Unhealthy},
			{answer: "503", want: Unhealthy, wantErr: "503"},
			{answer: "200", want: Unhealthy},
			{answer: "200", want: Healthy, call: "healthy"},
		}},
		{name: "connection refused", refused: true, fail: 3, succ: 1, steps: []step{
			{want: Unknown, wantErr: "connection refused"},
			{want: Unknown, wantErr: "connection refused"},
			{want: Unhealthy, call: "unhealthy: ", wantErr: "connection refused"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s *scripted
			url := ""
			if tt.refused {
				url = refusedURL(t)
			} else {
				s = newScripted(t)
				url = s.srv.URL + "/healthz"
			}
			f := newFixture(t, url, tt.fail, tt.succ)
			if f.p.Healthy() || f.p.State() != Unknown {
				t.Fatalf("new prober: healthy %v, state %v; want unknown", f.p.Healthy(), f.p.State())
			}
			if g := testutil.ToFloat64(f.p.healthyGauge); g != 0 {
				t.Fatalf("elector_app_healthy = %v before any probe, want 0", g)
			}
			failures := 0
			for i, st := range tt.steps {
				n := len(f.calls)
				err := f.step(t, s, st.answer)
				if (err == nil) != (st.wantErr == "") || (err != nil && !strings.Contains(err.Error(), st.wantErr)) {
					t.Fatalf("step %d (%s): probe error %v, want %q", i, st.answer, err, st.wantErr)
				}
				if err != nil {
					failures++
				}
				if got := f.p.State(); got != st.want {
					t.Fatalf("step %d (%s): state %v, want %v", i, st.answer, got, st.want)
				}
				if f.p.Healthy() != (st.want == Healthy) {
					t.Fatalf("step %d: Healthy() = %v in state %v", i, f.p.Healthy(), st.want)
				}
				want := 0.0
				if st.want == Healthy {
					want = 1
				}
				if g := testutil.ToFloat64(f.p.healthyGauge); g != want {
					t.Fatalf("step %d: elector_app_healthy = %v, want %v", i, g, want)
				}
				if c := testutil.ToFloat64(f.p.failures); c != float64(failures) {
					t.Fatalf("step %d: failures counter = %v, want %d", i, c, failures)
				}
				newCalls := f.calls[n:]
				switch {
				case st.call == "" && len(newCalls) > 0:
					t.Fatalf("step %d: unexpected OnChange %+v", i, newCalls)
				case st.call == "":
				case len(newCalls) != 1:
					t.Fatalf("step %d: OnChange calls %+v, want one %q", i, newCalls, st.call)
				case st.call == "healthy":
					if c := newCalls[0]; !c.healthy || c.reason != "app healthy" {
						t.Fatalf("step %d: OnChange %+v, want (true, \"app healthy\")", i, c)
					}
				default:
					c := newCalls[0]
					if c.healthy || !strings.HasPrefix(c.reason, "app "+st.call) || !strings.Contains(c.reason, st.wantErr) {
						t.Fatalf("step %d: OnChange %+v, want (false, \"app %s...%s\")", i, c, st.call, st.wantErr)
					}
				}
			}
		})
	}
}

// TestFailedOnChangeIsRetriedAfterNextProbe: an OnChange error (e.g. the
// election loop not running yet) is retried with the same arguments after
// each probe until it succeeds, and a newer change replaces it.
func TestFailedOnChangeIsRetriedAfterNextProbe(t *testing.T) {
	s := newScripted(t)
	f := newFixture(t, s.srv.URL+"/healthz", 1, 1)
	f.callErr = errors.New("election loop is not running")
	_ = f.step(t, s, "200")
	_ = f.step(t, s, "200")
	f.callErr = nil
	_ = f.step(t, s, "200")
	_ = f.step(t, s, "200")
	if len(f.calls) != 3 {
		t.Fatalf("OnChange calls %+v, want the healthy call three times (two failed)", f.calls)
	}
	for _, c := range f.calls {
		if c != (call{true, "app healthy"}) {
			t.Fatalf("OnChange calls %+v, want (true, app healthy) each", f.calls)
		}
	}
	// Fails once for the unhealthy change; then the app recovers before the
	// retry: only the newer change is delivered.
	f.callErr = errors.New("release not processed")
	_ = f.step(t, s, "503")
	f.callErr = nil
	_ = f.step(t, s, "200")
	got := f.calls[3:]
	if len(got) != 2 || got[0].healthy || !got[1].healthy {
		t.Fatalf("OnChange calls after the flip %+v, want (false, ...) then (true, ...)", got)
	}
	_ = f.step(t, s, "200")
	if len(f.calls) != 5 {
		t.Fatalf("OnChange called again without a change: %+v", f.calls[5:])
	}
}

// TestRunProbesEveryPeriodAndStops: Run probes at once and at every tick of
// its clock, and returns promptly when stopped, also during a probe that
// hangs (goleak checks that nothing is left behind).
func TestRunProbesEveryPeriodAndStops(t *testing.T) {
	s := newScripted(t)
	f := newFixture(t, s.srv.URL+"/healthz", 3, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		f.p.Run(ctx)
		close(done)
	}()
	// Between probes the ticker is the clock's only waiter (a probe adds
	// its timeout's timer).
	probeDone := func() {
		for f.clock.Waiters() != 1 {
			runtime.Gosched()
		}
	}
	<-s.received // the first probe at once
	for range 3 {
		probeDone()
		f.clock.Step(2 * time.Second)
		<-s.received
	}
	probeDone()
	s.set("hang")
	f.clock.Step(2 * time.Second)
	<-s.received // a probe is hanging now
	cancel()
	<-done
	if !f.p.Healthy() {
		t.Fatal("a probe cut short by stopping changed the state")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	ok := Config{URL: "http://127.0.0.1:8080/healthz", Period: 2 * time.Second, Timeout: time.Second, FailureThreshold: 3, SuccessThreshold: 1}
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"no url", func(c *Config) { c.URL = "" }, "URL must be set"},
		{"zero period", func(c *Config) { c.Period = 0 }, "period 0s must be positive"},
		{"timeout not below period", func(c *Config) { c.Timeout = c.Period }, "less than period"},
		{"zero timeout", func(c *Config) { c.Timeout = 0 }, "must be positive"},
		{"zero failure threshold", func(c *Config) { c.FailureThreshold = 0 }, "failure threshold 0"},
		{"zero success threshold", func(c *Config) { c.SuccessThreshold = 0 }, "success threshold 0"},
	}
	for _, tt := range tests {
		c := ok
		tt.mutate(&c)
		if _, err := New(c); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: New = %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
	reg := prometheus.NewRegistry()
	c := ok
	c.Registerer = reg
	if _, err := New(c); err != nil {
		t.Fatal(err)
	}
	if _, err := New(c); err == nil {
		t.Error("New registered the metrics twice on one registry without an error")
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"elector_app_healthy", "elector_app_health_probe_failures_total"} {
		if !names[n] {
			t.Errorf("metric %s not registered (have %v)", n, names)
		}
	}
}
