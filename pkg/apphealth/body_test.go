package apphealth

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// readSignal is a transport whose answers announce the first read of their
// body, so a test knows the prober has the headers and waits for the body.
type readSignal struct {
	next    http.RoundTripper
	reading chan struct{}
}

func (r readSignal) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err == nil {
		resp.Body = &signalBody{ReadCloser: resp.Body, reading: r.reading}
	}
	return resp, err
}

type signalBody struct {
	io.ReadCloser
	reading chan struct{}
	once    bool
}

func (b *signalBody) Read(p []byte) (int, error) {
	if !b.once {
		b.once = true
		b.reading <- struct{}{}
	}
	return b.ReadCloser.Read(p)
}

// TestStatusWhoseBodyStallsPastTheTimeoutIsAFailure: an app that sends "200"
// and then no body within the timeout fails the probe, as it fails the
// kubelet's (whose body read error is a failure).
func TestStatusWhoseBodyStallsPastTheTimeoutIsAFailure(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the body never comes
	}))
	defer srv.Close()
	f := newFixture(t, srv.URL, 1, 1)
	reading := make(chan struct{}, 1)
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	f.p.client = &http.Client{Transport: readSignal{next: tr, reading: reading}}
	done := make(chan error, 1)
	go func() { done <- f.p.Step(context.Background()) }()
	<-reading // the prober has the headers and reads the body
	f.clock.Step(f.p.cfg.Timeout)
	err := <-done
	if err == nil || !strings.Contains(err.Error(), "within") {
		t.Fatalf("a probe whose body did not arrive within the %v timeout returned %v (state %v), want a timeout failure", f.p.cfg.Timeout, err, f.p.State())
	}
	if f.p.State() != Unhealthy {
		t.Errorf("state %v after a failed probe with failure threshold 1, want unhealthy", f.p.State())
	}
}

// TestLongBodyIsReadUpToTheLimitAndSucceeds: an answer longer than the
// kubelet reads is a success (the kubelet truncates it).
func TestLongBodyIsReadUpToTheLimitAndSucceeds(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, strings.Repeat("x", 3*maxBody))
	}))
	defer srv.Close()
	f := newFixture(t, srv.URL, 1, 1)
	if err := f.p.Step(context.Background()); err != nil {
		t.Fatalf("a 200 with a long body failed: %v", err)
	}
}
