package client_test

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/client"
)

// leadRun is a RunWhileLeading running in the background: each call of fn
// is a term, with the token it got and the cause its context ended with.
type leadRun struct {
	started chan client.Token
	ended   chan error // context.Cause of fn's context, when fn returns
	cancel  context.CancelFunc
	done    chan error
}

func startRunWhileLeading(t *testing.T, url string, opts ...client.Option) *leadRun {
	t.Helper()
	c := newClient(t, url, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	lr := &leadRun{started: make(chan client.Token, 16), ended: make(chan error, 16), cancel: cancel, done: make(chan error, 1)}
	go func() {
		lr.done <- c.RunWhileLeading(ctx, func(ctx context.Context, tok client.Token) {
			lr.started <- tok
			<-ctx.Done()
			lr.ended <- context.Cause(ctx)
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-lr.done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("RunWhileLeading returned %v, want context.Canceled", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("RunWhileLeading did not return after its context was cancelled")
		}
	})
	return lr
}

func (lr *leadRun) nextStart(t *testing.T, wantToken int64) client.Token {
	t.Helper()
	select {
	case tok := <-lr.started:
		if tok.Token != wantToken || tok.LeaseUID == "" || tok.Deadline.IsZero() {
			t.Fatalf("fn started with %+v, want token %d with its lease UID and deadline", tok, wantToken)
		}
		return tok
	case <-time.After(10 * time.Second):
		t.Fatalf("fn did not start with token %d within 10s", wantToken)
	}
	return client.Token{}
}

func (lr *leadRun) nextEnd(t *testing.T, wantCause string) {
	t.Helper()
	select {
	case cause := <-lr.ended:
		if !errors.Is(cause, client.ErrLeadershipEnded) || !strings.Contains(cause.Error(), wantCause) {
			t.Fatalf("fn's context ended with %v, want ErrLeadershipEnded with %q", cause, wantCause)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("fn's context did not end within 10s (want %q)", wantCause)
	}
}

func (lr *leadRun) stillRunning(t *testing.T) {
	t.Helper()
	select {
	case cause := <-lr.ended:
		t.Fatalf("fn's context ended (%v) while the term goes on", cause)
	case tok := <-lr.started:
		t.Fatalf("fn started again (%+v) within the same term", tok)
	default:
	}
}

func TestRunWhileLeadingCancelsWhenLeadershipIsLost(t *testing.T) {
	sc := startSidecar(t, following)
	lr := startRunWhileLeading(t, sc.URL)
	// A follower: fn does not run until this pod leads.
	waitFor(t, "the client to follow /watch", func() bool { return len(sc.requestsTo("/watch")) > 0 })
	lr.stillRunning(t)
	sc.el.set(leading)
	lr.nextStart(t, 7)
	s := following
	s.Holder = "pod-b"
	sc.el.set(s)
	lr.nextEnd(t, "pod-b holds the lease")
	lr.stillRunning(t)
}

func TestRunWhileLeadingRestartsFnWhenTheTokenChanges(t *testing.T) {
	sc := startSidecar(t, leading)
	lr := startRunWhileLeading(t, sc.URL)
	lr.nextStart(t, 7)
	next := leading
	next.Token, next.LeaseTransitions, next.LastToken, next.ValidUntil = 9, 9, 9, leading.ValidUntil.Add(time.Minute)
	sc.el.set(next)
	lr.nextEnd(t, "the token changed from 7 to 9")
	lr.nextStart(t, 9)
}

// TestRunWhileLeadingKeepsFnThroughRenewals: renewals (new ETags, the same
// token, fresh validity) keep fn running well past the first expiresInMs.
func TestRunWhileLeadingKeepsFnThroughRenewals(t *testing.T) {
	// Each answer vouches for 2 s: a renewal may come 1.9 s late (a
	// loaded machine) before fn's context would end.
	sc := startSidecar(t, leadingFor(2*time.Second))
	lr := startRunWhileLeading(t, sc.URL)
	lr.nextStart(t, 7)
	s := leadingFor(2 * time.Second)
	for i := range 25 { // 25 renewals 100 ms apart: 2.5 s, beyond the 2 s first vouched for
		s.ValidUntil = s.ValidUntil.Add(time.Duration(i+1) * time.Second)
		sc.el.set(s)
		select {
		case cause := <-lr.ended:
			t.Fatalf("renewal %d: fn's context ended: %v", i+1, cause)
		case <-time.After(100 * time.Millisecond):
		}
	}
	lr.stillRunning(t)
}

// TestRunWhileLeadingCancelsWhenTheValidityRunsOut: the sidecar vouches for
// 300 ms and then says nothing (it hangs): fn's context ends once that has
// passed, not later.
func TestRunWhileLeadingCancelsWhenTheValidityRunsOut(t *testing.T) {
	sc := startSidecar(t, leadingFor(300*time.Millisecond))
	// Before the watch's request goes out: the client counts the 300 ms
	// from its request (it cannot know when the answer was written), so
	// from any later instant the end may come sooner.
	start := time.Now()
	lr := startRunWhileLeading(t, sc.URL)
	lr.nextStart(t, 7)
	lr.nextEnd(t, "did not vouch for token 7 in time")
	if since := time.Since(start); since < 300*time.Millisecond {
		t.Fatalf("fn's context ended %v after the watch began, before the 300ms the sidecar vouched for", since)
	}
}

// TestRunWhileLeadingCancelsWhenTheSidecarIsUnreachable: the sidecar dies
// (every connection refused from then on): fn's context ends when the last
// expiresInMs has passed.
func TestRunWhileLeadingCancelsWhenTheSidecarIsUnreachable(t *testing.T) {
	sc := startSidecar(t, leadingFor(400*time.Millisecond))
	lr := startRunWhileLeading(t, sc.URL)
	lr.nextStart(t, 7)
	sc.setHook(func(int, http.ResponseWriter, *http.Request) bool { panic(http.ErrAbortHandler) })
	sc.dropConnections()
	lr.nextEnd(t, "did not vouch for token 7 in time")
	// Back, leading with the same token: fn runs again (the client had
	// given it up).
	sc.setHook(nil)
	sc.el.set(leadingFor(time.Hour))
	lr.nextStart(t, 7)
}

// TestRunWhileLeadingStartsAgainWhenAReconnectCarriedTheExpiredState: the
// stream drops, and the reconnect (Last-Event-ID: the ETag of token 7's
// state) is still in flight when token 7's validity runs out and fn ends.
// The sidecar, leading with token 7 again, answers a request carrying its
// current state's ETag with nothing until that state changes: the client
// must ask again, or fn would not run while the sidecar vouches for it.
//
// The validity (1s from the last event) must outlast the client's
// reconnect; an attempt where a stalled machine let it run out first does
// not produce the case and is made again, up to 5 times.
func TestRunWhileLeadingStartsAgainWhenAReconnectCarriedTheExpiredState(t *testing.T) {
	for attempt := 1; attempt <= 5; attempt++ {
		if reconnectOutlivedTheState(t) {
			return
		}
		t.Logf("attempt %d: the validity ran out before the client reconnected; again", attempt)
	}
	t.Fatal("in 5 attempts the client never reconnected with Last-Event-ID within the state's 1s validity")
}

// reconnectOutlivedTheState is one attempt of the test above: false if fn
// ended before the reconnect carrying the state's ETag arrived.
func reconnectOutlivedTheState(t *testing.T) bool {
	t.Helper()
	sc := startSidecar(t, leadingFor(time.Second))
	lr := startRunWhileLeading(t, sc.URL)
	lr.nextStart(t, 7)
	release, held := make(chan struct{}), make(chan struct{}, 1)
	sc.setHook(func(_ int, _ http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/watch" && r.Header.Get("Last-Event-ID") != "" {
			select {
			case held <- struct{}{}:
			default:
			}
			<-release
		}
		return false
	})
	defer close(release)
	sc.dropConnections()
	select {
	case <-held:
	case cause := <-lr.ended:
		t.Logf("fn ended first: %v", cause)
		return false
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not reconnect within 10s")
	}
	lr.nextEnd(t, "did not vouch for token 7 in time")
	lr.nextStart(t, 7)
	return true
}

func TestRunWhileLeadingEndsFnWithItsContext(t *testing.T) {
	sc := startSidecar(t, leading)
	c := newClient(t, sc.URL)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	var returned bool
	done := make(chan error, 1)
	go func() {
		done <- c.RunWhileLeading(ctx, func(ctx context.Context, _ client.Token) {
			close(started)
			<-ctx.Done()
			for range 100 { // fn takes a while to stop: RunWhileLeading waits for it
				runtime.Gosched()
			}
			returned = true
		})
	}()
	<-started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || !returned {
		t.Fatalf("RunWhileLeading returned %v (fn returned: %v), want context.Canceled after fn returned", err, returned)
	}
}

func TestRunWhileLeadingRejectsANilFunc(t *testing.T) {
	c := newClient(t, "http://127.0.0.1:1")
	if err := c.RunWhileLeading(context.Background(), nil); err == nil {
		t.Fatal("RunWhileLeading(nil) succeeded")
	}
}

func TestFromEnvReadsElectorURL(t *testing.T) {
	t.Setenv("ELECTOR_URL", "http://127.0.0.1:5050/")
	c, err := client.FromEnv()
	if err != nil || c.URL() != "http://127.0.0.1:5050" {
		t.Fatalf("FromEnv with ELECTOR_URL set: %v, %v", c, err)
	}
	t.Setenv("ELECTOR_URL", "")
	if c, err := client.FromEnv(); err != nil || c.URL() != client.DefaultURL {
		t.Fatalf("FromEnv with ELECTOR_URL empty: %v, %v", c, err)
	}
	t.Setenv("ELECTOR_URL", "127.0.0.1:4040")
	if _, err := client.FromEnv(); err == nil || !strings.Contains(err.Error(), "$ELECTOR_URL") {
		t.Fatalf("FromEnv with a malformed ELECTOR_URL: %v, want an error naming $ELECTOR_URL", err)
	}
}
